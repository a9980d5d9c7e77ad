"""The sandbox's parent side: `Sandbox`, a pool of isolated worker interpreters (worker.py), and
what each job returns (`RunResult`, `Graded`). Only the calling process imports this module."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from dataclasses import asdict, dataclass, replace

import automon.sandbox.isolation as iso
from automon.sandbox.cgroups import PidsGroup
from automon.sandbox.limits import ISOLATION_NONE, Limits
from automon.sandbox.protocol import MAX_MESSAGE, MAX_PROGRAM, read_msg, send_msg

log = logging.getLogger(__name__)
_CHUNK = 16  # jobs per request to a worker: amortises the pipe round trip
# Characters per request: JSON writes a character in at most 6 bytes (\uXXXX), so a request stays
# under the protocol's MAX_MESSAGE.
_CHUNK_CHARS = (MAX_MESSAGE - (1 << 20)) // 6
_STATUSES = ("exited", "timeout", "signaled")


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

    @classmethod
    def from_wire(cls, x) -> "RunResult":
        """Validate a worker's reply: a list of exactly these fields and types."""
        if not (isinstance(x, list) and len(x) == 7 and x[0] in _STATUSES
                and (x[1] is None or type(x[1]) is int) and (x[2] is None or type(x[2]) is int)
                and type(x[3]) is str and type(x[4]) is str
                and all(type(t) in (int, float) for t in x[5:])):
            raise SandboxError(f"malformed result from a sandbox worker: {str(x)[:200]}")
        return cls(*x)


@dataclass(frozen=True)
class Graded:
    """A graded job: the program's run (it answered the grader's calls) and the grader's."""
    program: RunResult
    grader: RunResult


@dataclass(frozen=True)
class Job:
    """A program to run; with a grader spec ({"tests", "setup", "remote"}, see grading.py) the
    program's functions are called by those tests from a separate, trusted process."""
    program: str
    grader: dict | None = None

    def size(self) -> int:
        """Characters it puts in a request."""
        spec = self.grader or {}
        return len(self.program) + len(spec.get("tests", "")) + len(spec.get("setup", ""))


def too_large(program: str) -> str | None:
    """Why a program is not run at all (the sandbox's MAX_PROGRAM), or None."""
    if len(program) > MAX_PROGRAM:
        return f"the program has {len(program):,} characters, more than the sandbox runs ({MAX_PROGRAM:,})"
    return None


def _not_run(job: Job, why: str):
    """The result of a job the sandbox refused to run: a failed program (and a grader that saw it gone)."""
    program = RunResult("exited", 1, None, "", f"[sandbox: {why}]\n", 0.0, 0.0)
    if job.grader is None:
        return program
    return Graded(program, RunResult("exited", 1, None, "", "ProgramGone: the program was not run\n", 0.0, 0.0))


# The least the start-up probe (one `print('ok')`) runs under, whatever the pool's limits.
PROBE_LIMITS = Limits(timeout_s=10, cpu_s=5, memory_mb=256)


def probe_limits(limits: Limits) -> Limits:
    """The pool's limits, each raised to PROBE_LIMITS' where it is lower."""
    return replace(limits, timeout_s=max(limits.timeout_s, PROBE_LIMITS.timeout_s),
                   cpu_s=max(limits.cpu_limit, PROBE_LIMITS.cpu_limit),
                   memory_mb=max(limits.memory_mb, PROBE_LIMITS.memory_mb))


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker could not start or died); not a program failure."""


class Sandbox:
    """A pool of pre-started, isolated worker interpreters; use as a context manager.

    >>> with Sandbox(Limits(timeout_s=2), workers=2) as sb:
    ...     [r.exit_code for r in sb.run_many(["print(1)", "raise SystemExit(3)"])]
    [0, 3]
    """

    def __init__(self, limits: Limits = Limits(), workers: int = 2, isolation: str = "auto"):
        """isolation: "auto" (bwrap, else unshare; never none), or one mode by name: "bwrap",
        "unshare" or "none" (no isolation: the programs run with the caller's privileges)."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.modes = iso.candidates(isolation)
        self.limits = limits
        self.n_workers = workers
        self.requested = isolation
        self.isolation: str | None = None  # the mode in force, set by start()
        self._procs: list = []
        self._groups: list[PidsGroup] = []
        self._base: str | None = None

    def __enter__(self) -> "Sandbox":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        if self._procs:
            return
        errors = []
        for mode in self.modes:
            try:
                self._start(mode)
                self.isolation = mode
                if mode == ISOLATION_NONE:
                    log.warning("SANDBOX ISOLATION IS OFF (isolation=none): programs run with this "
                                "user's privileges, files and network")
                return
            except (iso.IsolationUnavailable, SandboxError, OSError) as e:
                self.close()
                errors.append(f"{mode}: {e}")
        raise SandboxError("no sandbox isolation can run here (" + "; ".join(errors) + "). Install "
                           "bubblewrap (apt-get install bubblewrap) or allow unprivileged user "
                           "namespaces; or, knowing that programs then run with your privileges, "
                           "set sandbox.isolation=none")

    def _start(self, mode: str) -> None:
        cmd = iso.command(mode, iso.WORKER_FILE)
        # Inside bwrap / unshare the worker's files live on its own tmpfs; uncontained, in a
        # directory of the caller's temp dir (removed by close()).
        if mode == ISOLATION_NONE:
            import tempfile
            shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
            self._base = tempfile.mkdtemp(prefix="automon-sandbox-", dir=shm)
        for i in range(self.n_workers):
            group = PidsGroup.create(f"automon-sandbox-{os.getpid()}-{id(self):x}-{i}") if mode != ISOLATION_NONE else None
            fd = None
            if group is not None:
                self._groups.append(group)
                group.set_max(self.limits.processes + 1)
                fd = group.procs_fd()
            try:
                # A session of its own in every mode (bwrap's --new-session does it again inside):
                # no process of the sandbox has a controlling terminal, so none can open /dev/tty,
                # push keystrokes into the user's shell (TIOCSTI), read the user's typing, change the
                # terminal's modes, or be stopped or killed by the terminal's ^Z / ^C meant for the CLI.
                p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=dict(iso.ENV) if mode != iso.ISOLATION_BWRAP else {}, cwd="/",
                                     pass_fds=() if fd is None else (fd,), start_new_session=True)
            finally:
                if fd is not None:
                    os.close(fd)
            self._procs.append(p)
            base = os.path.join(self._base, f"w{i}") if self._base else f"/tmp/w{i}"
            send_msg(p.stdin, {"base": base, "mode": mode, "cgroup_fd": fd,
                               "root": iso.program_root() if mode != ISOLATION_NONE else []})
        for p in self._procs:
            hello = self._recv(p)
            if not isinstance(hello, dict) or hello.get("mode") != mode:
                raise SandboxError(f"worker could not isolate itself: {hello}")
        # Probe the per-program container once: a kernel that refuses nested namespaces fails here.
        # Under limits of its own, never tighter than PROBE_LIMITS: a limit too small for any
        # program (--timeout-s 1e-9) is the programs' failure, not a sign that isolation is missing.
        probe = self._run_jobs([Job("print('ok')")], probe_limits(self.limits))[0]
        if not (probe.ok and probe.stdout == "ok\n"):
            raise SandboxError(f"a probe program failed: {probe.stderr.strip()[-300:] or probe}")

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
            p.stderr.close()
        self._procs = []
        for group in self._groups:
            group.remove()
        self._groups = []
        if self._base:
            import shutil
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    def run(self, program: str, limits: Limits | None = None) -> RunResult:
        return self.run_many([program], limits)[0]

    def run_many(self, programs: list[str], limits: Limits | None = None) -> list[RunResult]:
        """Run every program in its own contained process tree (under `limits`, default the
        pool's); results in input order."""
        return self.run_jobs([Job(p) for p in programs], limits)

    def run_jobs(self, jobs: list[Job], limits: Limits | None = None) -> list:
        """Run jobs (plain or graded); RunResult or Graded per job, in input order."""
        self.start()
        return self._run_jobs(jobs, limits or self.limits)

    def _run_jobs(self, jobs: list[Job], limits: Limits) -> list:
        lim = asdict(limits)
        for group in self._groups:  # the zygote and the program's tasks
            group.set_max(limits.processes + 1)
        results: list = [None] * len(jobs)
        todo = []
        for i, job in enumerate(jobs):
            why = too_large(job.program)
            if why is None and job.size() > _CHUNK_CHARS:
                raise ValueError(f"a job of {job.size():,} characters (program and tests) exceeds the sandbox's "
                                 f"{_CHUNK_CHARS:,}")
            if why is None:
                todo.append(i)
            else:
                results[i] = _not_run(job, why)
        chunks, chunk, chars = [], [], 0
        for i in todo:  # consecutive jobs, at most _CHUNK and _CHUNK_CHARS per request
            if chunk and (len(chunk) == _CHUNK or chars + jobs[i].size() > _CHUNK_CHARS):
                chunks.append(chunk)
                chunk, chars = [], 0
            chunk.append(i)
            chars += jobs[i].size()
        if chunk:
            chunks.append(chunk)
        chunks.reverse()  # pop() from the end hands them out in input order
        lock = threading.Lock()
        errors: list[BaseException] = []

        def wire(job: Job) -> dict:
            return {"program": job.program} if job.grader is None else {"program": job.program, "grader": job.grader}

        def feed(proc) -> None:
            try:
                while True:
                    with lock:
                        if not chunks or errors:
                            return
                        idx = chunks.pop()
                    send_msg(proc.stdin, {"limits": lim, "jobs": [wire(jobs[i]) for i in idx]})
                    reply = self._recv(proc)
                    if not isinstance(reply, list) or len(reply) != len(idx):
                        raise SandboxError("malformed reply from a sandbox worker")
                    for i, r in zip(idx, reply):
                        if jobs[i].grader is None:
                            results[i] = RunResult.from_wire(r)
                        elif isinstance(r, dict) and set(r) == {"program", "grader"}:
                            results[i] = Graded(RunResult.from_wire(r["program"]), RunResult.from_wire(r["grader"]))
                        else:
                            raise SandboxError("malformed graded result from a sandbox worker")
            except BaseException as e:  # surfaced in the calling thread below
                errors.append(e)

        threads = [threading.Thread(target=feed, args=(p,), daemon=True) for p in self._procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SandboxError(f"sandbox worker failed: {errors[0]!r}") from errors[0]
        return results

    def _recv(self, proc):
        try:
            return read_msg(proc.stdout)
        except (EOFError, ValueError):
            code = proc.poll()
            err = ""
            if code is not None:
                err = proc.stderr.read().decode("utf-8", "replace").strip()[-500:]
            raise SandboxError(f"sandbox worker {proc.pid} stopped (exit {code}): {err or 'no message'}") from None
