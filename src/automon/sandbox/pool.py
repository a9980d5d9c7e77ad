"""The sandbox's parent side: `Sandbox`, a pool of worker interpreters (worker.py), and the
`RunResult` of each program. Only the calling process imports this module; the workers do not,
so it may import whatever the parent needs (threads, subprocess) without slowing their forks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import astuple, dataclass

from automon.sandbox import worker
from automon.sandbox.worker import ISOLATION_NETNS, ISOLATION_SOCKET_PATCH, Limits, read_msg, send_msg

_CHUNK = 16  # programs per request to a worker: amortises the pipe round trip
_SHM = "/dev/shm"  # tmpfs: creating and removing a directory per run is ~10x cheaper than on disk


@dataclass(frozen=True)
class RunResult:
    """How one program ended.

    status: "exited" (exit_code is set), "timeout" (wall deadline hit, killed) or
            "signaled" (killed by a signal, e.g. SIGPROF at the CPU limit; `signal` is set).
    wall_s, cpu_s: how long it ran, and its CPU time (user + system); informative only, they vary
    from run to run.
    """
    status: str
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float

    @property
    def ok(self) -> bool:
        return self.status == "exited" and self.exit_code == 0


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker could not start or died); not a program failure."""


class Sandbox:
    """A pool of pre-started worker interpreters; use as a context manager.

    >>> with Sandbox(Limits(timeout_s=2), workers=2) as sb:
    ...     [r.exit_code for r in sb.run_many(["print(1)", "raise SystemExit(3)"])]
    [0, 3]
    """

    def __init__(self, limits: Limits = Limits(), workers: int = 2, network: str = "auto"):
        """network: "auto" (a network namespace where permitted, else the socket patch) or
        "socket_patch" (always the patch; for tests of the fallback)."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if network not in ("auto", ISOLATION_SOCKET_PATCH):
            raise ValueError(f"network must be 'auto' or '{ISOLATION_SOCKET_PATCH}', got {network!r}")
        self.limits = limits
        self.n_workers = workers
        self.network = network
        self.isolation: str | None = None  # set by start()
        self._procs: list = []
        self._base: str | None = None

    def __enter__(self) -> "Sandbox":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        if self._procs:
            return
        # Every run gets a fresh directory under this one (created and removed by the worker).
        shm = _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK | os.X_OK) else None
        self._base = tempfile.mkdtemp(prefix="automon-sandbox-", dir=shm)
        # A minimal environment: programs see none of the caller's variables (tokens, paths), and
        # hashing and text encoding are pinned for reproducible output.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONUTF8": "1",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        # Run worker.py as __main__ without putting its directory (src/automon/sandbox, whose
        # modules would shadow same-named ones a program imports) or the cwd (the caller's, with
        # whatever it holds) on sys.path; run_path of a file adds nothing to sys.path either.
        # (`python -P` does the same, but needs Python 3.11.)
        boot = (f"import runpy, sys; del sys.path[0]; "
                f"runpy.run_path({os.path.abspath(worker.__file__)!r}, run_name='__main__')")
        cmd = [sys.executable, "-c", boot, "--worker"]
        try:
            for i in range(self.n_workers):
                p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                self._procs.append(p)
                send_msg(p.stdin, (os.path.join(self._base, f"w{i}"), self.network))
            modes = {self._recv(p) for p in self._procs}
        except BaseException:
            self.close()
            raise
        # Workers of one pool share a machine and privileges, so they agree; report the weaker.
        self.isolation = ISOLATION_SOCKET_PATCH if ISOLATION_SOCKET_PATCH in modes else ISOLATION_NETNS

    def close(self) -> None:
        for p in self._procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
        self._procs = []
        if self._base:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    def run(self, program: str, limits: Limits | None = None) -> RunResult:
        return self.run_many([program], limits)[0]

    def run_many(self, programs: list[str], limits: Limits | None = None) -> list[RunResult]:
        """Run every program in its own process (under `limits`, default the pool's); results in
        input order."""
        self.start()
        lim = astuple(limits or self.limits)  # plain data: in the worker, worker.py is __main__
        results: list[RunResult | None] = [None] * len(programs)
        chunks = [range(i, min(i + _CHUNK, len(programs))) for i in range(0, len(programs), _CHUNK)]
        chunks.reverse()  # pop() from the end hands them out in input order
        lock = threading.Lock()
        errors: list[BaseException] = []

        def feed(proc) -> None:
            try:
                while True:
                    with lock:
                        if not chunks or errors:
                            return
                        idx = chunks.pop()
                    send_msg(proc.stdin, (lim, [programs[i] for i in idx]))
                    for i, r in zip(idx, self._recv(proc)):
                        results[i] = RunResult(*r)
            except BaseException as e:  # surfaced in the calling thread below
                errors.append(e)

        threads = [threading.Thread(target=feed, args=(p,), daemon=True) for p in self._procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SandboxError(f"sandbox worker failed: {errors[0]!r}") from errors[0]
        return results  # type: ignore[return-value]

    def _recv(self, proc):
        try:
            return read_msg(proc.stdout)
        except EOFError:
            raise SandboxError(f"sandbox worker {proc.pid} exited with {proc.wait()}; "
                               "its stderr (above) says why") from None
