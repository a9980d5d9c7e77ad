"""`Forked`: a function run in a forked child process, its value (or exception) sent back by pipe.

The build uses it to run work beside its main thread without sharing the GIL: sg_code's recipe (its
Python planning and its sandbox) while the other recipes run, and the post-write verification while
the audit runs. The child starts with the parent's memory (copy-on-write), so it needs nothing passed
but the arguments; only the result is pickled. Linux (fork) only, like the sandbox.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
from typing import Any, Callable

from automon.sandbox import confine


class Forked:
    """`fn(*args)` in a forked child, started at once. `result()` waits and returns (value, seconds the
    child took), or raises the child's exception (its traceback attached as a note); `close()` ends a
    child still running (the build failed or was stopped meanwhile). Use as a context manager."""

    def __init__(self, fn: Callable[..., Any], *args: Any, name: str = "automon-forked"):
        ctx = multiprocessing.get_context("fork")
        self.name = name
        self._conn, child_end = ctx.Pipe(duplex=False)
        # Not a daemon: a daemonic process may not start processes (the sandbox, a MinHash pool).
        self._proc = ctx.Process(target=_run, args=(child_end, os.getpid(), fn, args), name=name)
        self._proc.start()
        child_end.close()

    def done(self) -> bool:
        """Whether the child has sent its result (or died): result() would not wait."""
        return self._conn.poll() or not self._proc.is_alive()

    def result(self) -> tuple[Any, float]:
        try:
            ok, value, secs = self._conn.recv()
        except EOFError:
            self._proc.join()
            raise RuntimeError(f"{self.name}: the child process died (exit code {self._proc.exitcode})") from None
        self._proc.join()
        if not ok:
            raise value
        return value, secs

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._conn.close()

    def __enter__(self) -> "Forked":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def die_with_parent(parent: int) -> None:
    """In a forked child: be killed when `parent` dies (or leave now if it already has). A child that
    outlived a SIGKILLed build would go on writing in the build's temp dir and hold its lock (a fork
    inherits it), so a rerun found "another build is writing" and stopped."""
    confine.prctl(confine.PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:  # it died before the prctl: no signal will come
        os._exit(1)


def _run(conn, parent: int, fn: Callable[..., Any], args: tuple) -> None:
    die_with_parent(parent)
    t0 = time.perf_counter()
    try:
        out = (True, fn(*args))
    except BaseException as e:  # raised again in the parent
        e.add_note(f"in the forked {multiprocessing.current_process().name} process:\n{traceback.format_exc()}")
        out = (False, e)
    secs = time.perf_counter() - t0
    try:
        conn.send((*out, secs))
    except Exception as e:  # a value or an exception that does not pickle
        conn.send((False, RuntimeError(f"cannot send the result back: {e!r}\n{traceback.format_exc()}"), secs))
    finally:
        conn.close()
