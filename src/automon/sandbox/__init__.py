"""Run untrusted Python programs (policy-written code, gaming templates) isolated, fast, and
grade them with a verdict the program cannot forge. docs/security.md says what is isolated, how,
and what is not.

- isolation.py: how a worker is started: inside bubblewrap (the default), util-linux unshare, or,
  only when asked for by name, with no isolation.
- worker.py: the worker, run as a script inside the isolation: a zygote forks each program into a
  contained process tree (namespaces, rlimits, tree-wide CPU / memory accounting); the worker
  forks each grader. execute.py: what those processes run (a program as __main__, a grader).
- wire.py: what both sides share: Limits, the JSON protocol, the call channel and its value codec.
- pool.py: `Sandbox`, the parent side: a pool of pre-started workers (interpreter start-up would
  otherwise cost 20-40 ms per program) and the results, `RunResult` / `Graded`.
- grading.py: the visible (naive, gameable) and hidden (strict, separate-process) graders.
- cli.py: `python -m automon.sandbox check --code F --visible F --hidden F`, one JSON verdict,
  the same code path as the build.
"""

from automon.sandbox.pool import Graded, Job, RunResult, Sandbox, SandboxError
from automon.sandbox.wire import ISOLATION_BWRAP, ISOLATION_NONE, ISOLATION_UNSHARE, Limits

__all__ = ["Graded", "ISOLATION_BWRAP", "ISOLATION_NONE", "ISOLATION_UNSHARE", "Job", "Limits", "RunResult",
           "Sandbox", "SandboxError"]
