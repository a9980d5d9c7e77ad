"""The sandbox's worker: one per pool slot, started inside bubblewrap (or unshare; see isolation.py)
as a plain script (`python -P -s -S -B worker.py --worker`), standard library only, with the
modules it imports beside it (isolation.WORKER_FILES): zygote.py (the zygote and its programs) and
grader.py (the grader process) among them.

Four processes serve every graded job (a plain one needs no grader), so that nothing secret is
ever inside a program's memory and nothing of one program reaches the next:

- the WORKER reads jobs from the pool (programs, hidden tests and all) and hands each graded job
  to its GRADER, a process it forked: the trusted hidden tests, calling the program's functions
  over two pipes with values as plain JSON (channel.py, codec.py). The grader runs outside the
  programs' PID namespaces and is not dumpable, so no program can see, signal or read it; it
  restores the interpreter state tests may change after each job; the worker keeps each job's
  deadline from outside (a comparison running in C code hears no signal of its own): a grader
  past it is killed and replaced.
- the ZYGOTE, forked at start-up before the worker reads a single job (through a process that
  only waits), in a user and PID namespace of its own whose init (PID 1) it is. It never sees a
  test or a program's text: the worker hands it a memfd holding the program (read by the program's
  process itself), the program's ends of the call pipes and the limits. Once, it builds the
  programs' file system (confine.build_root: a read-only tmpfs holding a copy of the standard
  library and the libraries it loads, five device nodes, nothing of the host's file systems, nothing
  writable). For each program it enters fresh mount and PID namespaces (a new tmpfs /tmp;
  process ids from 1) and forks into them
- the PROGRAM, PID 1 of its namespace, which inherits only the zygote's memory (preloaded modules,
  nothing of any job), drops every capability, installs a seccomp filter and runs under rlimits.
  The zygote watches its tree: wall deadline, the CPU time, memory (its /tmp included) and tasks
  of every process in its namespace; when the program's main process ends the kernel kills every
  process left in its namespace, and when the tree goes over a limit the zygote kills them all
  (kill(-1) from the namespace above): no `setsid` + double fork outlives its run, and nothing a
  program wrote, started or counted is there for the next. Being PID 1, a program differs from
  `python prog.py` in what any init differs in: a signal its own tree sends it with the default
  action is ignored (SIGKILL included), and orphans of its tree become its children.

Isolation none (asked for by name only): the same processes without namespaces; a program runs in
a directory of its own, removed after it, and its tree is every descendant of the zygote (a child
subreaper), scanned and killed the same way.

stdout / stderr are captured through pipes and truncated (head and tail kept). PYTHONHASHSEED=0
pins set and dict-of-str iteration order inside programs, so a batch is deterministic.
"""

from __future__ import annotations

import os
import sys
import time

# The worker's modules sit beside this file; `-P` keeps its directory off sys.path, so it is put
# there just long enough to import them (a program's `import limits` then fails as it would anywhere).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
try:
    import confine
    from grader import Grader
    from limits import Limits
    from protocol import read_msg, send_msg, sock_recv, sock_send
    from watch import remove_tree
    from zygote import start_zygote
finally:
    sys.path.remove(_HERE)

# ---------------------------------------------------------------------------------------------
# The worker: reads jobs, hands programs to the zygote (zygote.py), graded ones' tests to its grader
# (grader.py).


class _Worker:
    def __init__(self, mode: str, base: str, cgroup_fd: int | None, root: list):
        self.mode = mode
        confine.prctl(confine.PR_SET_DUMPABLE, 0)
        self.zygote, self.zygote_pid = start_zygote(mode, base, cgroup_fd, root)
        if cgroup_fd is not None:
            os.close(cgroup_fd)
        self.grader = Grader()

    def run(self, job: dict, limits: Limits, wire_limits: dict) -> list | dict:
        """Run one job; RunResult's fields (a program) or {"program": ..., "grader": ...}."""
        t0 = time.monotonic()
        spec = job.get("grader")
        source = os.memfd_create("program")
        data = job["program"].encode("utf-8", "surrogatepass")
        view = memoryview(data)
        while view:
            view = view[os.write(source, view):]
        fds, calls_g = [source], ()
        if spec is not None:
            req_r, req_w = os.pipe()
            resp_r, resp_w = os.pipe()
            fds += [req_r, resp_w]
            calls_g = (resp_r, req_w)
        try:
            sock_send(self.zygote, {"limits": wire_limits, "graded": spec is not None}, fds)
        finally:
            for fd in fds:
                os.close(fd)
        grader = self.grader.grade(spec, calls_g, limits, wire_limits, t0) if spec is not None else None
        report, _ = sock_recv(self.zygote)  # the program's run: it ended, or it was ended
        return report if grader is None else {"program": report, "grader": grader}


def serve() -> None:
    """Serve batches of jobs on stdin/stdout until stdin closes."""
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    # Nothing the worker (or a child before its redirect) prints may corrupt the protocol stream.
    fd = os.open(os.devnull, os.O_RDWR)
    os.dup2(fd, 0)
    os.dup2(fd, 1)
    os.close(fd)
    hello = read_msg(inp)
    try:
        base = hello["base"]
        os.makedirs(base, 0o700, exist_ok=True)
        worker = _Worker(hello["mode"], base, hello.get("cgroup_fd"), hello.get("root") or [])
        send_msg(out, {"mode": worker.mode})
    except BaseException as e:
        send_msg(out, {"error": f"{type(e).__name__}: {e}"})
        return
    try:
        while True:
            try:
                msg = read_msg(inp)
            except EOFError:  # the pool closed, or its process died: leave nothing behind
                return
            limits = Limits(**msg["limits"])
            send_msg(out, [worker.run(job, limits, msg["limits"]) for job in msg["jobs"]])
    finally:
        worker.grader.close()
        worker.zygote.close()
        try:
            os.waitpid(worker.zygote_pid, 0)
        except ChildProcessError:
            pass
        remove_tree(base)


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    serve()
