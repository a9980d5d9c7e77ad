"""The sandbox's worker: one per pool slot, started inside bubblewrap (or unshare; see isolation.py)
as a plain script (`python -P -s -S -B worker.py --worker`), standard library only, with wire.py,
execute.py, confine.py and watch.py beside it.

Two processes serve every job, so that nothing secret is ever inside the program's memory:

- the WORKER reads jobs from the pool (programs, hidden tests and all) and runs each job's GRADER
  itself: the trusted hidden tests, calling the program's functions over two pipes with values as
  plain JSON (wire.Channel), outside the programs' PID namespace and not dumpable, so no program
  can see, signal or read it. Interpreter state the tests may change is restored after each job.
  At start-up, before it reads a single job, it forks (through a process that only waits)
- the ZYGOTE, in a user and PID namespace of its own whose init (PID 1) it is, which forks each
  PROGRAM. The zygote never sees a test or a program's text: the worker hands it a memfd holding
  the program (read by the program's process itself), the program's ends of the call pipes and the
  limits. A program forked from it inherits only the zygote's memory: preloaded modules, nothing of
  any job. Programs share the zygote's mount namespace, set up once (a tmpfs /tmp, emptied after
  each program; /proc, /dev/shm, /run hidden), drop every capability, install a seccomp filter and
  run under rlimits. The zygote watches each: wall deadline, the CPU time, memory and tasks of its
  whole process tree (every process of the namespace), and afterwards kills every process left
  (kill(-1) from init): no `setsid` + double fork outlives its run, and a program cannot see or
  signal anything outside its namespace (the worker, other runs).

Isolation none (asked for by name only): the same processes without namespaces; a program's tree is
its process group, killed at the end.

stdout / stderr are captured through pipes and truncated (head and tail kept). PYTHONHASHSEED=0
pins set and dict-of-str iteration order inside programs, so a batch is deterministic.
"""

from __future__ import annotations

import builtins
import gc
import io
import json
import os
import select
import shutil
import signal
import socket
import struct
import sys
import time
import traceback

# wire.py and execute.py sit beside this file; `-P` keeps its directory off sys.path, so it is put
# there just long enough to import them (a program's `import wire` then fails as it would anywhere).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
try:
    import confine
    from watch import Capture, Proc, kill_group, spawn
    from execute import run_grader, run_program
    from wire import ISOLATION_NONE, Limits, read_msg, send_msg
finally:
    sys.path.remove(_HERE)

_SCAN_S = 0.02  # how often the zygote sums a running program tree's CPU time and memory
_RUN_DIR = "/tmp/run"  # a program's cwd and TMPDIR in contained modes (the zygote's tmpfs)
_GRACE_S = 1.0  # the grader's deadline after the program's: it learns of the program's end first

# Imported by the zygote so that programs find them already loaded (a child inherits them):
# `typing` alone costs ~9 ms per import and most HumanEval prompts start with `from typing import`.
# Not `random`, whose per-fork reseeding hook would slow every fork down.
_PRELOAD = ("typing", "re", "math", "collections", "heapq", "itertools", "functools", "bisect", "string",
            "copy", "cmath", "array", "ctypes")

# ---------------------------------------------------------------------------------------------
# Worker <-> zygote: a Unix socket; a request is length-prefixed JSON with file descriptors.

_LEN = struct.Struct("!I")


def _sock_send(sock: socket.socket, obj, fds: list[int] = ()) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    msg = _LEN.pack(len(data)) + data
    sent = socket.send_fds(sock, [msg], list(fds)) if fds else sock.send(msg)
    if sent < len(msg):
        sock.sendall(msg[sent:])


def _sock_recv(sock: socket.socket):
    """One message and the fds sent with it; EOFError when the other side is gone."""
    data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
    if not data:
        raise EOFError
    while len(data) < _LEN.size or len(data) < _LEN.size + _LEN.unpack_from(data)[0]:
        more = sock.recv(1 << 16)
        if not more:
            raise EOFError
        data += more
    return json.loads(data[_LEN.size:]), fds


# ---------------------------------------------------------------------------------------------
# The zygote: forks, confines and watches each program.


def _program(mode: str, limits: Limits, source_fd: int, calls: tuple[int, int] | None, tasks: int) -> int:
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
        confine.seccomp()
        os.chdir(_RUN_DIR)
        os.environ["TMPDIR"] = _RUN_DIR
    else:
        confine.rlimits(limits, None)
    for name in ("wire", "execute", "confine", "watch"):  # as for any script: not importable
        sys.modules.pop(name, None)
    return run_program(program, calls)


class _Zygote:
    """Serves the worker's requests on `sock`, one program at a time. Contained, it is the init of
    the PID namespace the programs run in: every process there but itself belongs to the program
    being run."""

    def __init__(self, mode: str, base: str, sock: socket.socket):
        self.mode, self.base, self.sock, self.n = mode, base, sock, 0
        self.contained = mode != ISOLATION_NONE
        self.proc_fd = confine.zygote_mounts(mode) if self.contained else None
        self.tmp_mb = None

    def serve(self) -> None:
        while True:
            try:
                req, fds = _sock_recv(self.sock)
            except EOFError:
                return
            _sock_send(self.sock, self.run(req, fds))

    def run(self, req: dict, fds: list[int]) -> list:
        self.n += 1
        limits = Limits(**req["limits"])
        source_fd, calls = fds[0], (tuple(fds[1:3]) if req["graded"] else None)
        t0 = time.monotonic()
        if self.contained:
            if limits.memory_mb != self.tmp_mb:
                confine.size_tmp(limits.memory_mb)
                self.tmp_mb = limits.memory_mb
            tmp = _RUN_DIR
        else:
            tmp = os.path.join(self.base, str(self.n))
        os.mkdir(tmp, 0o700)
        # Tasks of the sandbox's user in the zygote's user namespace while the program runs: the
        # process that waits for the zygote, the zygote, and the program's own.
        tasks = 2 + limits.processes

        def target():
            if not self.contained:
                os.chdir(tmp)
                os.environ["TMPDIR"] = tmp
            return _program(self.mode, limits, source_fd, calls, tasks)

        proc = None
        try:
            proc = spawn(target, limits, tuple(fds))
            for fd in fds:
                os.close(fd)
            timed_out = self._watch(proc, limits, t0 + limits.timeout_s)
        finally:
            self._end(proc)
            _empty(os.path.dirname(tmp) if self.contained else tmp, tmp)
        result = proc.result(t0, timed_out)
        proc.close()
        return result

    def _watch(self, proc: Proc, limits: Limits, deadline: float) -> bool:
        """Wait until the program exited and its pipes closed, or the deadline (True). Contained:
        every _SCAN_S its tree's total CPU time and resident memory are checked."""
        next_scan = time.monotonic() + _SCAN_S  # most programs end before their tree is ever scanned
        poll = _SCAN_S if self.contained or proc.pidfd is None else None
        while not proc.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            ready, _, _ = select.select(proc.fds(), [], [], min(left, poll) if poll else left)
            proc.step(ready)
            if self.contained and proc.reaped is None and time.monotonic() >= next_scan:
                next_scan = time.monotonic() + _SCAN_S
                cpu, mem, tasks = _tree_usage(self.proc_fd)
                over = ("cpu" if cpu > limits.cpu_limit * 1.05 + 0.05 else
                        "memory" if mem > limits.memory_mb * 1024 * 1024 else
                        "processes" if tasks > limits.processes else None)
                if over:
                    proc.killed_for = over
                    os.kill(-1, signal.SIGKILL)
        return False

    def _end(self, proc: Proc | None) -> None:
        """Kill whatever the program left running, reap it all."""
        if self.contained:
            try:
                os.kill(-1, signal.SIGKILL)  # from init: every process of the namespace but itself
            except ProcessLookupError:
                pass
        elif proc is not None:
            kill_group(proc.pid)
        if proc is not None:
            proc.finish()
        while True:  # orphans reparented to this init (or subreaper), reaped
            try:
                pid, _ = os.waitpid(-1, 0 if self.contained else os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def _empty(top: str, run_dir: str) -> None:
    """After a program: remove what it left (contained: everything in the programs' /tmp; else its
    own directory). Its processes are gone, so nothing writes there any more."""
    try:
        os.rmdir(run_dir)  # the common case: the program left nothing behind
    except OSError:
        shutil.rmtree(run_dir, ignore_errors=True)
    if top != run_dir:
        for name in os.listdir(top):
            path = os.path.join(top, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def _read(dir_fd: int, path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def _tree_usage(proc_fd: int) -> tuple[float, int, int]:
    """CPU seconds (live processes and the children they reaped), memory (proportional set size:
    a page shared by n processes counts 1/n in each, so forked children are not charged for their
    parent's pages; the resident size where that is not readable) and tasks of the running
    program's processes: every process in the zygote's PID namespace (or one nested in it) but the
    zygote. `proc_fd` is the worker's /proc, one level up: NSpid lists a process's pid there, then
    in the zygote's namespace (where the zygote is 1), then deeper."""
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    cpu, mem, tasks = 0, 0, 0
    for name in os.listdir(proc_fd):
        if not name.isdigit():
            continue
        try:
            status = _read(proc_fd, f"{name}/status")
            ns_pids = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith(b"NSpid:")), [])
            if len(ns_pids) < 2 or ns_pids[1] == b"1":
                continue
            fields = _read(proc_fd, f"{name}/stat").rsplit(b")", 1)[1].split()
            cpu += sum(int(x) for x in fields[11:15])
            tasks += int(fields[17])
            try:
                rollup = _read(proc_fd, f"{name}/smaps_rollup")
                mem += next(int(ln.split()[1]) * 1024 for ln in rollup.splitlines() if ln.startswith(b"Pss:"))
            except (OSError, StopIteration):
                mem += int(fields[21]) * page
        except OSError:
            continue
    return cpu / tick, mem, tasks


def _start_zygote(mode: str, base: str, cgroup_fd: int | None) -> tuple[socket.socket, int]:
    """Start the zygote, before any job is read; the worker keeps one end of a socket to it.

    Contained, a first child enters a new user and PID namespace and forks the zygote as that
    namespace's init, then only waits for it (the worker itself stays outside: its later children,
    the graders, must not be in the programs' namespace, where the zygote's kill(-1) would reach
    them). The worker and its graders hold no capabilities; the zygote holds them in its own user
    namespace, to give each program a mount namespace. With `cgroup_fd` (the cgroup.procs of a pids
    cgroup, see cgroups.py) the zygote moves itself into that group before it forks anything."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid:
        theirs.close()
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
            _Zygote(mode, base, theirs).serve()
            code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


# ---------------------------------------------------------------------------------------------
# The worker: reads jobs, hands programs to the zygote, runs graders.


class _GraderTimeout(BaseException):
    """The grader ran past its deadline (a BaseException: tests' `except Exception` cannot swallow it)."""


def _grade(spec: dict, calls: tuple[int, int], limits: Limits, t0: float) -> list:
    """Run the grader (trusted setup + tests, the program's functions as remote calls) here, in the
    worker: outside the programs' PID namespace, where no program can see, signal or read it. Its
    stdout / stderr are captured; interpreter state the tests may change is restored afterwards,
    so one job's tests cannot change the next one's. RunResult's fields."""
    saved = (sys.stdout, sys.stderr, sys.argv, sys.excepthook, sys.getrecursionlimit(), dict(builtins.__dict__))
    sys.stdout, sys.stderr = out, err = io.StringIO(), io.StringIO()

    fired = []

    def expire(*_):
        fired.append(True)  # run_as_main reports any exception, this one too: the flag says it was ours
        raise _GraderTimeout

    old_alarm = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, t0 + limits.timeout_s + _GRACE_S - time.monotonic()))
    cpu0, timed_out, code = time.process_time(), False, 1
    try:
        code = run_grader(spec, calls)
        timed_out = bool(fired)
    except _GraderTimeout:
        timed_out = True
    except BaseException as e:  # the tests broke the interpreter's own error reporting
        err.write(f"\n{type(e).__name__}: {e}\n")
    finally:
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


class _Worker:
    def __init__(self, mode: str, base: str, cgroup_fd: int | None):
        self.mode = mode
        confine.prctl(confine.PR_SET_DUMPABLE, 0)
        self.zygote, self.zygote_pid = _start_zygote(mode, base, cgroup_fd)
        if cgroup_fd is not None:
            os.close(cgroup_fd)

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
            _sock_send(self.zygote, {"limits": wire_limits, "graded": spec is not None}, fds)
        finally:
            for fd in fds:
                os.close(fd)
        grader = _grade(spec, calls_g, limits, t0) if spec is not None else None
        report, _ = _sock_recv(self.zygote)  # the program's run: it ended, or it was ended
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
        worker = _Worker(hello["mode"], base, hello.get("cgroup_fd"))
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
        worker.zygote.close()
        try:
            os.waitpid(worker.zygote_pid, 0)
        except ChildProcessError:
            pass
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    serve()
