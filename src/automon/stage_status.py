"""A stage's answer to "is my output current for this config?", and the config identity it compares.

Each stage answers for itself (`automon.data.status.status`, `automon.training.status.status`,
`automon.evaluation.status.status`); the stage's own entry point and pipeline.py ask the same
function, so a rerun of the stage and the pipeline cannot disagree about what is left to do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable


class Currency(str, enum.Enum):
    CURRENT = "current"      # complete outputs of this config and these inputs: nothing to do
    RESUMABLE = "resumable"  # unfinished work of this config: running the stage continues it
    STALE = "stale"          # outputs of another config or other inputs: running the stage replaces them
    MISSING = "missing"      # nothing there yet


@dataclass(frozen=True)
class Status:
    state: Currency
    reason: str  # one clause a log line can carry: "training config changed: train.lr: ..."

    @property
    def current(self) -> bool:
        return self.state is Currency.CURRENT

    def __str__(self) -> str:
        return f"{self.state.value}: {self.reason}"


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; a leaf keeps its value (lists included)."""
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def identity(cfg: dict, non_identity: Iterable[str] = ()) -> dict[str, Any]:
    """The flattened config without the keys (and the sections under them) that say where or how
    verbosely, not what: those may change without making an output stale."""
    skip = tuple(non_identity)
    return {k: v for k, v in flatten(cfg).items() if not any(k == n or k.startswith(n + ".") for n in skip)}


def config_diff(old: dict, new: dict, non_identity: Iterable[str] = ()) -> list[str]:
    """`key: old -> new` for every identity key whose value differs (1 and 1.0 are equal)."""
    skip = tuple(non_identity)
    a, b = identity(old, skip), identity(new, skip)
    absent = "<absent>"
    return [f"{k}: {a.get(k, absent)!r} -> {b.get(k, absent)!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, absent) != b.get(k, absent)]


def diff_reason(what: str, diff: list[str], limit: int = 4) -> str:
    more = f" (+{len(diff) - limit} more)" if len(diff) > limit else ""
    return f"{what}: " + "; ".join(diff[:limit]) + more
