"""Run untrusted Python programs (policy-written code, gaming templates) isolated, fast, and
grade them with a verdict the program cannot forge. docs/security.md says what is isolated, how,
and what is not.

The parent side (imported by automon):
- pool.py: `Sandbox`, a pool of pre-started workers (interpreter start-up would otherwise cost
  20-40 ms per program) and the results, `RunResult` / `Graded`.
- isolation.py: how a worker is started: inside bubblewrap (the default), util-linux unshare, or,
  only when asked for by name, with no isolation; cgroups.py: a pids cgroup per worker, where the
  caller may create one.
- grading.py: the visible (naive, gameable) and hidden (strict, separate-process) graders.
- cli.py: `python -m automon.sandbox check --code F --visible F --hidden F`, one JSON verdict,
  the same code path as the build.

The worker side, run as plain scripts inside the isolation (standard library only; the parent
imports the shared ones too):
- worker.py: the worker; grader.py: its grader process (each job's hidden tests); zygote.py: its
  zygote (it forks each program into fresh namespaces, confined); confine.py: the namespaces, mounts,
  capabilities, rlimits and seccomp filter; watch.py: a program's captured output and end, and
  its process tree's usage; execute.py: what a program's and a grader's processes run.
- limits.py: the mode names and `Limits`; protocol.py: the parent <-> worker and worker <-> zygote
  messages; channel.py: the grader <-> program call channel; codec.py: the values it carries.
"""

from automon.sandbox.pool import Graded, Job, RunResult, Sandbox, SandboxError
from automon.sandbox.limits import ISOLATION_BWRAP, ISOLATION_NONE, ISOLATION_UNSHARE, Limits

__all__ = ["Graded", "ISOLATION_BWRAP", "ISOLATION_NONE", "ISOLATION_UNSHARE", "Job", "Limits", "RunResult",
           "Sandbox", "SandboxError"]
