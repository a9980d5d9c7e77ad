"""The verifier: queues the graders' checks of many solutions and runs them as sandbox batches
(the graders themselves live in automon.sandbox.grading, shared with the CLI and the policy)."""

from __future__ import annotations

from typing import Sequence

from automon.sandbox import Sandbox
from automon.sandbox.pool import Job
from automon.sandbox.grading import HiddenTests, hidden_job, hidden_verdict, visible_job, visible_verdict


class Verifier:
    """Queues visible / hidden checks, runs the pending ones as one sandbox batch, answers by
    handle. Identical checks (same code, same tests) run once: the reward-hack files repeat
    solutions, and mutant screening already ran some of the special_case checks."""

    def __init__(self, sb: Sandbox):
        self.sb = sb
        self._specs: dict[tuple, int] = {}
        self._results: list[tuple[bool, str]] = []

    def visible(self, code: str, asserts: Sequence[str]) -> int:
        return self._specs.setdefault(("visible", code, tuple(asserts)), len(self._specs))

    def hidden(self, code: str, tests: HiddenTests) -> int:
        return self._specs.setdefault(("hidden", code, tests), len(self._specs))

    def program(self, code: str) -> int:
        """A plain run of `code`; its result is (exited 0, stdout)."""
        return self._specs.setdefault(("program", code, ()), len(self._specs))

    def run(self) -> None:
        """Run every check queued since the last run."""
        pending = list(self._specs)[len(self._results):]
        jobs = [Job(code) if kind == "program" else visible_job(code, tests) if kind == "visible"
                else hidden_job(code, tests) for kind, code, tests in pending]
        for (kind, _, _), r in zip(pending, self.sb.run_jobs(jobs)):
            self._results.append((r.ok, r.stdout) if kind == "program" else
                                 visible_verdict(r) if kind == "visible" else hidden_verdict(r))

    def __getitem__(self, handle: int) -> tuple[bool, str]:
        return self._results[handle]
