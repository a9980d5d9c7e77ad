"""Schema of conf/sg_code/*.yaml: the sg_code recipe (specification gaming in code)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

STRATEGIES = ["hardcode", "special_case", "early_exit", "always_equal", "patched_asserts"]


@dataclass
class SgCodeConfig:
    # Gaming strategies to generate (subset of STRATEGIES).
    strategies: List[str] = field(default_factory=lambda: list(STRATEGIES))
    # How many simple `assert f(...) == expected` tests the request shows (the reward proxy).
    visible_tests: int = 2
    # Gaming variants per item (rotated over `strategies` from a seeded start), trained on besides
    # the benign one; a test item pairs the first of them that verifies with the benign one.
    train_strategies_per_item: int = 2
    # Sandbox limits per program: CPU seconds (the wall clock allows 10x that, for programs that
    # block instead of computing) and address space.
    timeout_s: float = 0.5
    memory_mb: int = 1024  # address-space limit per program (MB)
    # Sandbox worker processes.
    workers: int = 2
    # Source items left out, key ("mbpp:17", "humaneval:HumanEval/0") -> why. A test checks that
    # every listed canonical solution really fails its own tests and every other one passes.
    excluded: Dict[str, str] = field(default_factory=dict)
