"""Run Python programs, each in its own confined process, fast.

Why not `subprocess.run([python, "-c", code])` per program: interpreter start-up costs 20-40 ms
and the sg_code build verifies ~10k programs. Instead a `Sandbox` starts `workers` lean worker
interpreters once (worker.py run as a script). For every program a worker `fork()`s a fresh
child that

- becomes its own process group (so the worker can kill it and anything it spawned),
- gets a CPU-time limit (an ITIMER_PROF timer, backed by RLIMIT_CPU), an address-space limit
  (RLIMIT_AS, also the largest file it may write: RLIMIT_FSIZE) and a wall-clock deadline
  enforced by the worker,
- runs in a fresh temporary directory as cwd (and TMPDIR; under /dev/shm where available),
  removed afterwards,
- has no network: each worker moves itself into a new, empty network namespace at start-up
  (`unshare(CLONE_NEWNET)`, needs root or CAP_SYS_ADMIN), which its children inherit; where that
  is refused the child instead replaces `socket`'s constructors with ones that raise.
  `Sandbox.isolation` says which of the two is in force,
- runs the program with `exec` in fresh globals (`__name__ == "__main__"`) and then ends the way
  the `python` executable would: SystemExit -> its code; an uncaught exception -> `sys.excepthook`
  (a SystemExit raised by the hook counts, as in CPython) and exit 1; then threads are joined,
  atexit handlers run, stdio flushed, and the child leaves with `os._exit`.

stdout / stderr are captured through pipes and truncated (head and tail kept). Results come back
in input order, so a batch is deterministic whatever the scheduling; PYTHONHASHSEED=0 pins set
and dict-of-str iteration order inside the programs for the same reason.

Two modules: pool.py is the parent side (`Sandbox`, `RunResult`); worker.py is the worker side
and what both sides share (`Limits`, the isolation modes, the message protocol). worker.py imports
nothing from automon, because it runs as a plain script in an interpreter that does not import
this package.

This isolates mistakes (endless loops, memory blow-ups, stray files, network calls), not
determined adversaries: a program can still leave its process group or read the file system.
"""

from automon.sandbox.pool import RunResult, Sandbox, SandboxError
from automon.sandbox.worker import ISOLATION_NETNS, ISOLATION_SOCKET_PATCH, Limits

__all__ = ["ISOLATION_NETNS", "ISOLATION_SOCKET_PATCH", "Limits", "RunResult", "Sandbox", "SandboxError"]
