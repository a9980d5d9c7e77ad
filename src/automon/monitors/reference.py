"""A reference monitor: one rule of automon.data.reference (a single feature of a misbehavior, or the
conjunction), scored like any monitor: P(yes) is 1 where the rule flags, else 0."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

from automon.controls import REFERENCE_VERSION
from automon.data.reference import flag as rule_flag
from automon.errors import UserError
from automon.monitors.base import Monitor, Prediction, Rendered
from automon.prompts import get_template


@dataclass(eq=False)
class ReferenceMonitor(Monitor):
    rule: str = "construct"
    monitor_kind: ClassVar[str] = "reference"

    def score(self, items: Sequence[Rendered]) -> list[Prediction]:
        out = []
        for it in items:
            f = rule_flag(self.rule, it.sample)
            out.append(Prediction(p_yes=float(f or 0), text="n/a" if f is None else ("yes" if f else "no"), mass=1.0))
        return out

    def flag(self, p: Prediction) -> int | None:
        return None if p.p_yes is None else int(p.p_yes >= 0.5)


def reference_monitors(c: Any, manifest_hash_of: Callable[[str], str]) -> list[Monitor]:
    """backend=reference: one monitor per backend.rules entry, each a matrix row `reference:<rule>`."""
    if get_template(c.prompt.name).kind != "direct":
        raise UserError(f"backend=reference gives a flag, not an evidence answer (prompt={c.prompt.name})",
                        "prompt", "use prompt=direct_v1")
    return [ReferenceMonitor(name=f"reference-{r}", row=f"reference:{r}", artifact_hash=f"{REFERENCE_VERSION}:{r}",
                             rule=r) for r in c.backend.rules]
