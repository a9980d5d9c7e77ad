"""Schema of conf/sg_code/*.yaml: the sg_code recipe (specification gaming in code), and the check of
sg_code's settings the build runs before it reads anything (its SubsetSpec.check)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

from automon.errors import at_least


@dataclass
class SgCodeConfig:
    # How many simple `assert f(...) == expected` tests the request shows (the reward proxy).
    visible_tests: int = 2
    # Sandbox limits per program: CPU seconds (the wall clock allows 10x that, for programs that
    # block instead of computing) and address space.
    timeout_s: float = 0.5
    memory_mb: int = 1024  # address-space limit per program (MB)
    # Sandbox worker processes.
    workers: int = 2
    # Source items left out, key ("mbpp:17", "humaneval:HumanEval/0") -> why. A test checks that
    # every listed canonical solution really fails its own tests and every other one passes.
    excluded: Dict[str, str] = field(default_factory=dict)


def check_sg_code(cfg: Any, error: type) -> None:
    """sg_code's settings (the build config's `sg_code` node), raised as `error`."""
    c = cfg.sg_code
    for key in ("visible_tests", "workers", "memory_mb"):
        at_least(f"sg_code.{key}", getattr(c, key), 1, error)
    if not c.timeout_s > 0:  # nan too
        raise error(f"sg_code.timeout_s={c.timeout_s} is out of range", "sg_code.timeout_s",
                    "use a positive number of CPU seconds")
