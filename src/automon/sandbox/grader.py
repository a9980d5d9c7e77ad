"""The sandbox worker's grader process (worker.py says how the processes fit together): forked from the
worker, outside the programs' PID namespaces and not dumpable, it runs each graded job's trusted hidden
tests, calling the program's functions over two pipes. Standard library only; imported by worker.py as
a top-level module (see limits.py)."""

from __future__ import annotations

import builtins
import io
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback

try:
    from automon.sandbox import confine
    from automon.sandbox.execute import run_grader
    from automon.sandbox.limits import Limits
    from automon.sandbox.protocol import sock_recv, sock_send
    from automon.sandbox.watch import Capture
except ImportError:  # run inside the sandbox, beside the modules
    import confine
    from execute import run_grader
    from limits import Limits
    from protocol import sock_recv, sock_send
    from watch import Capture

_GRACE_S = 1.0  # the grader's deadline after the program's: it learns of the program's end first
_KILL_AFTER_S = 0.5  # past its deadline, a grader that did not stop itself is killed
GRADER_MIN_MB = 256  # the least memory a grader may add for one job's tests (see _grader_budget)


class _GraderTimeout(BaseException):
    """The grader ran past its deadline (a BaseException: tests' `except Exception` cannot swallow it)."""


def _grade(spec: dict, calls: tuple[int, int], limits: Limits, t0: float) -> list:
    """In the grader process: run one job's grader (trusted setup + tests, the program's functions
    as remote calls) with its stdout / stderr captured; interpreter state the tests may change is
    restored afterwards, so one job's tests cannot change the next one's. A SIGALRM at the deadline
    ends tests that run Python code; whatever else they run, the worker kills this process a little
    later (Grader.grade). RunResult's fields."""
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


class Grader:
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
