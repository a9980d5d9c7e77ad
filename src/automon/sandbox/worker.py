"""The sandbox's worker side, and what both sides share (Limits, isolation modes, protocol).

`Sandbox` (pool.py) starts each worker interpreter by running this file as __main__ with
`--worker`; the worker then forks one confined child per program (see the package docstring for
what confines it). The file is self-contained, standard library only: a worker runs it as a
plain script with a minimal environment (no PYTHONPATH), and importing automon there would only
add to every fork. The parent imports Limits and the protocol from here, so both sides share one
definition.

The module-level imports are kept to what a worker needs: fork() costs grow with what the forking
process has loaded, and `threading` / `random` even register per-fork hooks (measured: importing
threading doubles the cost of a fork). The parent-only machinery lives in pool.py.
"""

from __future__ import annotations

import atexit
import io
import linecache
import os
import pickle
import resource
import select
import shutil
import signal
import struct
import sys
import time
import traceback
from dataclasses import dataclass

ISOLATION_NETNS = "netns"
ISOLATION_SOCKET_PATCH = "socket_patch"
_HEADER = struct.Struct("!Q")
_CLONE_NEWNET = 0x40000000
# Imported once by each worker so that programs find them already loaded (a child inherits them):
# `typing` alone costs ~9 ms per import and most HumanEval prompts start with `from typing import`.
# Not `random`, whose per-fork reseeding hook would slow every fork down.
_PRELOAD = ("typing", "re", "math", "collections", "heapq", "itertools", "functools", "bisect", "string",
            "copy", "cmath", "array")


@dataclass(frozen=True)
class Limits:
    """Per-program limits.

    The CPU-time limit defaults to timeout_s. A CPU limit tighter than the wall limit gives
    load-independent verdicts for busy programs: CPU time does not grow when other processes
    compete for the cores, wall time does. A program over its CPU time is killed by SIGPROF.
    """
    timeout_s: float = 5.0        # wall clock
    memory_mb: int = 512          # RLIMIT_AS of the child
    output_bytes: int = 8192      # kept per stream (first half and last half)
    cpu_s: float | None = None

    @property
    def cpu_limit(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.timeout_s


def send_msg(f, obj) -> None:
    """Write one length-prefixed pickled message and flush."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_HEADER.pack(len(data)) + data)
    f.flush()


def _read_exact(f, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = f.read(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def read_msg(f):
    """Read one message written by send_msg; EOFError when the stream ends first."""
    (n,) = _HEADER.unpack(_read_exact(f, _HEADER.size))
    return pickle.loads(_read_exact(f, n))


# ---------------------------------------------------------------------------------------------
# Worker side: everything below runs in the worker interpreter (this file run with --worker).


def _isolate_network() -> str:
    """Move this worker into an empty network namespace; return the isolation mode in force."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNET) == 0:
            return ISOLATION_NETNS
    except (OSError, AttributeError):
        pass
    return ISOLATION_SOCKET_PATCH


def _patch_socket() -> None:
    """Fallback without a network namespace: every way to open a socket raises."""
    import socket

    def refuse(*_a, **_k):
        raise OSError(101, "Network is unreachable (network disabled in sandbox)")

    class NoSocket(socket.socket):
        def __init__(self, *a, **k):
            refuse()

    socket.socket = NoSocket  # type: ignore[misc]
    for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo",
                 "gethostbyname", "gethostbyname_ex"):
        setattr(socket, name, refuse)


class _Capture:
    """Collects one stream, keeping its first and last `limit // 2` bytes (the tail holds the
    traceback and whatever a grader prints last)."""

    def __init__(self, limit: int):
        self.half, self.head, self.tail, self.total = max(1, limit // 2), b"", b"", 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data)[-self.half:]

    def text(self) -> str:
        gap = b"\n...[truncated]...\n" if self.total > len(self.head) + len(self.tail) else b""
        return (self.head + gap + self.tail).decode("utf-8", "replace")


def _child(program: str, tmp: str, limits: Limits, mode: str, out_w: int, err_w: int) -> None:
    """In the forked child: confine, run `program`, and leave with os._exit (never returns)."""
    code = 1
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 16)  # the worker's protocol pipes and every other inherited fd
        # Fresh stdio objects on fds 0-2, configured as `python` configures them for pipes, rather
        # than whatever the forking process had in sys.stdout & co.
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                     encoding="utf-8")
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                                       encoding="utf-8")
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                                       encoding="utf-8", errors="backslashreplace",
                                                       line_buffering=True)
        # ITIMER_PROF counts this process's CPU time with sub-second precision; its SIGPROF ends
        # the process. RLIMIT_CPU (whole seconds) backs it up should the program reset the timer.
        signal.setitimer(signal.ITIMER_PROF, limits.cpu_limit)
        backstop = int(limits.cpu_limit) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (backstop, backstop + 1))
        mem = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        # Files count too (the temp dir may live in RAM): a program cannot write more than this.
        resource.setrlimit(resource.RLIMIT_FSIZE, (mem, mem))
        os.chdir(tmp)
        os.environ["TMPDIR"] = tmp
        if mode == ISOLATION_SOCKET_PATCH:
            _patch_socket()
        atexit._clear()  # only the program's own handlers run at exit
        sys.argv = [""]
        sys.excepthook = sys.__excepthook__
        code = _run_as_main(program)
    except BaseException:  # the confinement itself failed: report it, never run unconfined
        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    finally:
        os._exit(code)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _run_as_main(program: str) -> int:
    """Run `program` like `python program.py` would and return its exit status."""
    glb = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "<program>"}
    # Lets tracebacks quote the program's source lines, as they would for a file.
    linecache.cache["<program>"] = (len(program), None, program.splitlines(True), "<program>")
    try:
        exec(compile(program, "<program>", "exec"), glb)
        code = 0
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException as e:
        code = 1
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        e.__traceback__ = tb  # hide this function's frame, as `python program.py` would
        try:
            if sys.excepthook is sys.__excepthook__:
                # The same report, but through linecache, which knows the program's source (the
                # C default hook only reads source lines from files).
                traceback.print_exception(type(e), e, tb)
            else:
                sys.excepthook(type(e), e, tb)
        except SystemExit as hook_exit:  # CPython honours SystemExit raised inside the hook
            code = _exit_code(hook_exit)
        except BaseException:
            print("Error in sys.excepthook:", file=sys.stderr)
            traceback.print_exc()
            print("\nOriginal exception was:", file=sys.stderr)
            traceback.print_exception(type(e), e, tb)
    # Interpreter shutdown order: join non-daemon threads, run atexit handlers, flush stdio.
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return code


def run_one(program: str, tmp: str, limits: Limits, mode: str) -> tuple:
    """Fork a child for `program` in the new directory `tmp`, enforce the wall deadline, collect
    its output, clean up; returns pool.RunResult's fields, in order."""
    os.mkdir(tmp, 0o700)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    t0 = time.monotonic()
    try:
        pid = os.fork()
        if pid == 0:
            _child(program, tmp, limits, mode, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        caps = {out_r: _Capture(limits.output_bytes), err_r: _Capture(limits.output_bytes)}
        try:
            pidfd = os.pidfd_open(pid)  # readable once the child has exited
        except (AttributeError, OSError):  # Linux < 5.3 (e.g. RHEL 8): poll wait4 instead
            pidfd = None
        deadline = t0 + limits.timeout_s
        open_fds, reaped, timed_out = {out_r, err_r}, None, False
        try:
            # Wait for the child to exit AND both pipes to reach EOF (or the deadline).
            while open_fds or reaped is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                watch = list(open_fds) + ([pidfd] if pidfd is not None and reaped is None else [])
                ready, _, _ = select.select(watch, [], [], left if pidfd is not None else min(left, 0.01))
                if reaped is None and (pidfd is None or pidfd in ready):
                    wpid, status, usage = os.wait4(pid, os.WNOHANG)
                    reaped = (status, usage) if wpid else None
                for fd in ready:
                    if fd == pidfd:
                        continue
                    data = os.read(fd, 65536)
                    if data:
                        caps[fd].add(data)
                    else:
                        open_fds.discard(fd)
                if reaped and open_fds and not select.select(list(open_fds), [], [], 0)[0]:
                    break  # a grandchild holds the pipes open: what was written is read
        finally:
            if pidfd is not None:
                os.close(pidfd)
            try:
                os.killpg(pid, signal.SIGKILL)  # the child if still running, and anything it spawned
            except (ProcessLookupError, PermissionError):
                pass
        if reaped is None:
            _, status, usage = os.wait4(pid, 0)
        else:
            status, usage = reaped
    finally:
        os.close(out_r)
        os.close(err_r)
        try:
            os.rmdir(tmp)  # the common case: the program left nothing behind
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    times = (round(time.monotonic() - t0, 4), round(usage.ru_utime + usage.ru_stime, 4))
    out, err = caps[out_r].text(), caps[err_r].text()
    if timed_out:
        return ("timeout", None, None, out, err, *times)
    if os.WIFSIGNALED(status):
        return ("signaled", None, os.WTERMSIG(status), out, err, *times)
    return ("exited", os.WEXITSTATUS(status), None, out, err, *times)


def serve() -> None:
    """Serve batches of programs on stdin/stdout until stdin closes."""
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    # Nothing the worker (or a child before its redirect) prints may corrupt the protocol stream.
    fd = os.open(os.devnull, os.O_RDWR)
    os.dup2(fd, 0)
    os.dup2(fd, 1)
    os.close(fd)
    base, network = read_msg(inp)
    os.mkdir(base, 0o700)
    for name in _PRELOAD:
        __import__(name)
    mode = _isolate_network() if network == "auto" else ISOLATION_SOCKET_PATCH
    send_msg(out, mode)
    n = 0
    while True:
        try:
            limits, programs = read_msg(inp)
        except EOFError:  # the pool closed, or its process died: leave nothing behind
            shutil.rmtree(base, ignore_errors=True)
            return
        limits = Limits(*limits)
        results = []
        for p in programs:
            n += 1
            results.append(run_one(p, os.path.join(base, str(n)), limits, mode))
        send_msg(out, results)


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    serve()
