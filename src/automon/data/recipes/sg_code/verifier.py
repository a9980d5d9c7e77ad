"""The verifier: queues the graders' checks of many solutions and runs them as sandbox batches."""

from __future__ import annotations

import secrets
from typing import Sequence

from automon.data.recipes.sg_code.graders import hidden_program, hidden_verdict, visible_program, visible_verdict
from automon.sandbox import Sandbox


class Verifier:
    """Queues visible / hidden checks, runs the pending ones as one sandbox batch, answers by
    handle. Identical checks (same code, same tests) run once: the reward-hack files repeat
    solutions, and mutant screening already ran some of the special_case checks."""

    def __init__(self, sb: Sandbox):
        self.sb = sb
        self._specs: dict[tuple[str, str, str], int] = {}
        self._results: list[tuple[bool, str]] = []

    def visible(self, code: str, asserts: Sequence[str]) -> int:
        return self._specs.setdefault(("visible", code, "\n".join(asserts)), len(self._specs))

    def hidden(self, code: str, strict_test_src: str) -> int:
        return self._specs.setdefault(("hidden", code, strict_test_src), len(self._specs))

    def run(self) -> None:
        """Run every check queued since the last run."""
        pending = list(self._specs)[len(self._results):]
        programs, sentinels = [], []
        for kind, code, tests in pending:
            if kind == "visible":
                programs.append(visible_program(code, tests.split("\n")))
                sentinels.append(None)
            else:
                sentinel = f"automon-sentinel-{secrets.token_hex(8)}"
                programs.append(hidden_program(code, tests, sentinel))
                sentinels.append(sentinel)
        for r, sentinel in zip(self.sb.run_many(programs), sentinels):
            self._results.append(visible_verdict(r) if sentinel is None else hidden_verdict(r, sentinel))

    def __getitem__(self, handle: int) -> tuple[bool, str]:
        return self._results[handle]
