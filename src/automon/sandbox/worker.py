"""The sandbox's worker: one per pool slot, started inside bubblewrap (or unshare; see isolation.py)
as a plain script (`python -P -s -S -B worker.py --worker`), standard library only, with the
modules it imports beside it (isolation.WORKER_FILES).

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
  programs' file system (confine.build_root: a read-only minimal root, six device nodes, nothing
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

import builtins
import gc
import io
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback

# The worker's modules sit beside this file; `-P` keeps its directory off sys.path, so it is put
# there just long enough to import them (a program's `import limits` then fails as it would anywhere).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
try:
    import confine
    from execute import run_grader, run_program
    from limits import ISOLATION_NONE, Limits
    from protocol import read_msg, send_msg, sock_recv, sock_send
    from watch import Capture, Proc, descendants, namespace_members, remove_tree, spawn, tree_usage
finally:
    sys.path.remove(_HERE)

OWN_MODULES = ("limits", "protocol", "codec", "channel", "execute", "confine", "watch")
_SCAN_S = 0.02  # how often the zygote sums a running program tree's CPU time and memory
_RUN_DIR = "/tmp/run"  # a program's cwd and TMPDIR in contained modes (on its own tmpfs)
_GRACE_S = 1.0  # the grader's deadline after the program's: it learns of the program's end first
_KILL_AFTER_S = 0.5  # past its deadline, a grader that did not stop itself is killed
GRADER_MIN_MB = 256  # the least memory a grader may add for one job's tests (see _grader_budget)

# Imported by the zygote so that programs find them already loaded (a child inherits them):
# `typing` alone costs ~9 ms per import and most HumanEval prompts start with `from typing import`.
# Not `random`, whose per-fork reseeding hook would slow every fork down.
_PRELOAD = ("typing", "re", "math", "collections", "heapq", "itertools", "functools", "bisect", "string",
            "copy", "cmath", "array", "ctypes")

# ---------------------------------------------------------------------------------------------
# The zygote: forks, confines and watches each program.


def _program(mode: str, limits: Limits, source_fd: int, calls: tuple[int, int] | None, tasks: int,
             seccomp: "confine.Seccomp | None") -> int:
    """The program's own process: read its source, confine itself, run it (and, graded, answer
    the grader's calls)."""
    chunks, off = [], 0
    while chunk := os.pread(source_fd, 1 << 20, off):
        chunks.append(chunk)
        off += len(chunk)
    os.close(source_fd)
    program = b"".join(chunks).decode("utf-8", "surrogatepass")
    if mode != ISOLATION_NONE:
        confine.rlimits(limits, tasks)
        confine.drop_caps()
        seccomp.install()
        os.chdir(_RUN_DIR)
        os.environ["TMPDIR"] = _RUN_DIR
    else:
        confine.rlimits(limits, None)
    for name in OWN_MODULES:  # as for any script: not importable
        sys.modules.pop(name, None)
    return run_program(program, calls)


class _Zygote:
    """Serves the worker's requests on `sock`, one program at a time. Contained, it is the init of
    the PID namespace the programs' own namespaces nest in."""

    def __init__(self, mode: str, base: str, sock: socket.socket | None, root: list):
        self.mode, self.base, self.sock, self.n = mode, base, sock, 0
        self.contained = mode != ISOLATION_NONE
        self.me = os.getpid()
        self.seccomp = None
        if self.contained:
            self.proc_fd, self.own_ns = confine.build_root(root)
            self.seccomp = confine.Seccomp()  # built once; each program only installs it
        else:
            self.proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)

    def serve(self) -> None:
        while True:
            try:
                req, fds = sock_recv(self.sock)
            except EOFError:
                return
            try:
                result = self.run(req, fds)
            except Exception as e:  # one program must never stop the worker: it is reported as failed
                result = ["exited", 1, None, "", f"[sandbox: the program could not be run: {type(e).__name__}: {e}]\n",
                          0.0, 0.0]
            sock_send(self.sock, result)

    def run(self, req: dict, fds: list[int]) -> list:
        self.n += 1
        limits = Limits(**req["limits"])
        source_fd, calls = fds[0], (tuple(fds[1:3]) if req["graded"] else None)
        t0 = time.monotonic()
        # Tasks of the sandbox's user in the zygote's user namespace while the program runs: the
        # process that waits for the zygote, the zygote, and the program's own.
        tasks = 2 + limits.processes
        run_dir = _RUN_DIR if self.contained else os.path.join(self.base, str(self.n))
        tmp_fd = proc = None
        try:
            if self.contained:
                # Fresh mount and PID namespaces: the program, the first process forked into them,
                # is their PID 1 (see confine.program_namespaces).
                tmp_fd = confine.program_namespaces(limits.memory_mb, run_dir)
                try:
                    proc = spawn(lambda: _program(self.mode, limits, source_fd, calls, tasks, self.seccomp), limits,
                                 tuple(fds))
                finally:
                    confine.own_namespaces(self.own_ns)
            else:
                os.mkdir(run_dir, 0o700)

                def uncontained():
                    os.chdir(run_dir)
                    os.environ["TMPDIR"] = run_dir
                    return _program(self.mode, limits, source_fd, calls, tasks, None)

                proc = spawn(uncontained, limits, tuple(fds))
            _close(fds)
            timed_out = self._watch(proc, limits, t0 + limits.timeout_s, tmp_fd)
        finally:
            _close(fds)
            self._kill_tree()
            if proc is not None:
                proc.finish()
            if tmp_fd is not None:
                os.close(tmp_fd)  # the program's mount namespace, and its tmpfs, go with this last reference
            if not self.contained:
                self._reap()
                remove_tree(run_dir)
        result = proc.result(t0, timed_out)
        proc.close()
        return result

    def _watch(self, proc: Proc, limits: Limits, deadline: float, tmp_fd: int | None) -> bool:
        """Wait until the program exited and its pipes closed, or the deadline (True). Every
        _SCAN_S its tree's total CPU time, memory and tasks are checked; once its main process
        ended, the rest of its tree is ended too (left running, it could hold the pipes, and the
        run, open)."""
        next_scan = time.monotonic() + _SCAN_S  # most programs end before their tree is ever scanned
        ended = False
        while not proc.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            ready, _, _ = select.select(proc.fds(), [], [], min(left, _SCAN_S))
            proc.step(ready)
            if proc.reaped is not None:
                if not ended:
                    self._kill_tree()
                    ended = True
            elif time.monotonic() >= next_scan:
                next_scan = time.monotonic() + _SCAN_S
                cpu, mem, tasks = self._usage(tmp_fd)
                over = ("cpu" if cpu > limits.cpu_limit * 1.05 + 0.05 else
                        "memory" if mem > limits.memory_mb * 1024 * 1024 else
                        "processes" if tasks > limits.processes else None)
                if over:
                    proc.killed_for = over
                    self._kill_tree()
        return False

    def _usage(self, tmp_fd: int | None) -> tuple[float, int, int]:
        if tmp_fd is None:
            return tree_usage(self.proc_fd, descendants(self.proc_fd, self.me))
        cpu, mem, tasks = tree_usage(self.proc_fd, namespace_members(self.proc_fd))
        st = os.fstatvfs(tmp_fd)  # the program's files are memory too (tmpfs)
        return cpu, mem + (st.f_blocks - st.f_bfree) * st.f_frsize, tasks

    def _kill_tree(self) -> None:
        if self.contained:
            try:
                os.kill(-1, signal.SIGKILL)  # from init: every process of the namespace (and those nested) but itself
            except ProcessLookupError:
                pass
            return
        for _ in range(1000):  # until no live descendant is left (each round kills what the last one forked)
            pids = descendants(self.proc_fd, self.me)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    @staticmethod
    def _reap() -> None:
        while True:  # orphans reparented to this subreaper (isolation none)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return


def _close(fds: list[int]) -> None:
    while fds:
        try:
            os.close(fds.pop())
        except OSError:
            pass


def _start_zygote(mode: str, base: str, cgroup_fd: int | None, root: list) -> tuple[socket.socket, int]:
    """Start the zygote, before any job is read; the worker keeps one end of a socket to it.

    Contained, a first child enters a new user and PID namespace and forks the zygote as that
    namespace's init, then only waits for it (the worker itself stays outside: its later children,
    the graders, must not be in the programs' namespace, where the zygote's kill(-1) would reach
    them). The worker and its graders hold no capabilities; the zygote holds them in its own user
    namespace, to build the programs' root and give each program its own namespaces. With `cgroup_fd` (the cgroup.procs of a pids
    cgroup, see cgroups.py) the zygote moves itself into that group before it forks anything."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid:
        theirs.close()
        try:
            sock_recv(ours)  # the zygote confined itself (else it printed why, and is gone)
        except EOFError:
            raise OSError("the zygote could not confine itself (see the worker's stderr)") from None
        return ours, pid
    code = 1
    try:
        ours.close()
        confine.prctl(confine.PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if mode != ISOLATION_NONE:
            uid, gid = os.getuid(), os.getgid()
            confine.unshare(confine.CLONE_NEWUSER | confine.CLONE_NEWPID)
            confine.map_ids(uid, gid)
        zygote = os.fork()
        if zygote:  # this process only waits: it leaves with the zygote
            theirs.close()
            if cgroup_fd is not None:
                os.close(cgroup_fd)
            _, status = os.waitpid(zygote, 0)
            code = os.waitstatus_to_exitcode(status) & 0xFF
        else:
            confine.prctl(confine.PR_SET_PDEATHSIG, int(signal.SIGKILL))
            confine.prctl(confine.PR_SET_DUMPABLE, 0)
            if cgroup_fd is not None:
                os.write(cgroup_fd, b"0")  # "0": the writer itself
                os.close(cgroup_fd)
            if mode == ISOLATION_NONE:
                confine.prctl(confine.PR_SET_CHILD_SUBREAPER, 1)
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: as init, a program's SIGINT is ignored
            for name in _PRELOAD:
                __import__(name)
            # Objects that exist now are never collected: a child's collections then leave their
            # pages alone instead of writing to (and so copying) every one of them after the fork.
            gc.freeze()
            zygote = _Zygote(mode, base, theirs, root)
            sock_send(theirs, {"ready": True})
            zygote.serve()
            code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)



# ---------------------------------------------------------------------------------------------
# The worker: reads jobs, hands programs to the zygote, forks graders.


class _GraderTimeout(BaseException):
    """The grader ran past its deadline (a BaseException: tests' `except Exception` cannot swallow it)."""


def _grade(spec: dict, calls: tuple[int, int], limits: Limits, t0: float) -> list:
    """In the grader process: run one job's grader (trusted setup + tests, the program's functions
    as remote calls) with its stdout / stderr captured; interpreter state the tests may change is
    restored afterwards, so one job's tests cannot change the next one's. A SIGALRM at the deadline
    ends tests that run Python code; whatever else they run, the worker kills this process a little
    later (_Grader.grade). RunResult's fields."""
    saved = (sys.stdout, sys.stderr, sys.argv, sys.excepthook, sys.getrecursionlimit(), dict(builtins.__dict__))
    sys.stdout, sys.stderr = out, err = io.StringIO(), io.StringIO()
    fired = []

    def expire(*_):
        fired.append(True)  # run_as_main reports any exception, this one too: the flag says it was ours
        raise _GraderTimeout

    old_alarm = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, t0 + limits.timeout_s + _GRACE_S - time.monotonic()))
    # The grader's memory, bounded like the program's: what the tests build from a reply (set() of a
    # returned range built 1 GB in C code) counts against it, and past it the tests fail with a
    # MemoryError instead of taking the machine's memory (a worker holds one grader).
    saved_as = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space() + _grader_budget(limits), saved_as[1]))
    cpu0, timed_out, code = time.process_time(), False, 1
    try:
        code = run_grader(spec, calls)
        timed_out = bool(fired)
    except _GraderTimeout:
        timed_out = True
    except BaseException as e:  # the tests broke the interpreter's own error reporting
        err.write(f"\n{type(e).__name__}: {e}\n")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, saved_as)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_alarm)
        for fd in calls:
            os.close(fd)
        sys.stdout, sys.stderr, sys.argv, sys.excepthook = saved[:4]
        sys.setrecursionlimit(saved[4])
        if builtins.__dict__ != saved[5]:
            builtins.__dict__.clear()
            builtins.__dict__.update(saved[5])
    caps = [Capture(limits.output_bytes) for _ in range(2)]
    for cap, buf in zip(caps, (out, err)):
        cap.add(buf.getvalue().encode("utf-8", "backslashreplace"))
    times = [round(time.monotonic() - t0, 4), round(time.process_time() - cpu0, 4)]
    if timed_out:
        return ["timeout", None, None, caps[0].text(), caps[1].text(), *times]
    return ["exited", code, None, caps[0].text(), caps[1].text(), *times]


def _grader_budget(limits: Limits) -> int:
    """Bytes of address space a grader may add while it runs one job's tests: twice the program's
    memory limit, and at least GRADER_MIN_MB (a reply is up to 16 MiB of JSON, decoded)."""
    return max(GRADER_MIN_MB, 2 * limits.memory_mb) << 20


def _address_space() -> int:
    """This process's virtual size now (bytes; /proc/self/statm's first field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


class _Grader:
    """The worker's grader process: forked from the worker (outside the programs' PID namespaces,
    not dumpable: no program can see, signal or read it), it runs one job's grader after another
    (forking one per job would cost a fork on every graded job). The worker keeps each job's
    deadline from outside: a grader still busy _KILL_AFTER_S past it (a comparison in C code hears
    no signal) is killed, and a fresh one forked for the next job."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                confine.prctl(confine.PR_SET_PDEATHSIG, int(signal.SIGKILL))
                ours.close()
                os.closerange(3, theirs.fileno())
                os.closerange(theirs.fileno() + 1, 1 << 16)
                while True:
                    try:
                        req, fds = sock_recv(theirs)
                    except EOFError:
                        code = 0
                        break
                    sock_send(theirs, _grade(req["spec"], tuple(fds), Limits(**req["limits"]), req["t0"]))
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        theirs.close()
        self.pid, self.sock = pid, ours

    def grade(self, spec: dict, calls: tuple[int, int], limits: Limits, wire_limits: dict, t0: float) -> list:
        try:
            sock_send(self.sock, {"spec": spec, "limits": wire_limits, "t0": t0}, list(calls))
        finally:
            for fd in calls:
                os.close(fd)
        deadline = t0 + limits.timeout_s + _GRACE_S + _KILL_AFTER_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return self._replace(t0, ["timeout", None, None])
            try:
                return sock_recv(self.sock)[0]
            except (EOFError, OSError, ValueError):  # it died (a crash in C code): a failed grader
                return self._replace(t0, ["signaled", None, int(signal.SIGKILL)])

    def _replace(self, t0: float, how: list) -> list:
        """End this grader process (it overran its deadline, or died) and start a fresh one."""
        self.close()
        self.__init__()
        return [*how, "", "[sandbox: the grader was ended from outside]\n", round(time.monotonic() - t0, 4), 0.0]

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.sock.close()
        os.waitpid(self.pid, 0)


class _Worker:
    def __init__(self, mode: str, base: str, cgroup_fd: int | None, root: list):
        self.mode = mode
        confine.prctl(confine.PR_SET_DUMPABLE, 0)
        self.zygote, self.zygote_pid = _start_zygote(mode, base, cgroup_fd, root)
        if cgroup_fd is not None:
            os.close(cgroup_fd)
        self.grader = _Grader()

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
