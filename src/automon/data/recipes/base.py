"""What recipes produce: candidate items with an optional test pair and training variants."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass
class Draft:
    """A sample before split assignment: everything but id / pair_id / split / category / task."""
    request: str
    response: str
    label: int
    evidence: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # Distinguishes several samples of one item (cue wording, strategy, ...); part of the sample id.
    variant: str = "0"


@dataclass
class Item:
    """One source item (question, problem, conversation, function) as a recipe sees it.

    keys: every source-item key this item touches; the first is its own key (e.g. "mbpp:17").
          Extra keys link derived data to its origin (a rewritten MBPP problem also carries
          "mbpp:17"), so an item and everything derived from it land in the same split.
    test_pair: (misbehavior, benign) on the same request, or None when the item may only train.
    train: the samples this item contributes when it lands in the training split.
    test_controls: benign contrast controls (wordings v9, automon.controls) that join the test
          pair when the item lands in the test split, grouped with it.
    """
    keys: tuple[str, ...]
    subset: str
    source: str
    test_pair: tuple[Draft, Draft] | None
    train: list[Draft]
    test_controls: list[Draft] = field(default_factory=list)


class Drops(Counter):
    """Counts of everything dropped during the build, keyed "subset/reason"."""

    def add(self, subset: str, reason: str, n: int = 1) -> None:
        self[f"{subset}/{reason}"] += n


def leave_out(items: list[Item], excluded: Mapping[str, str], subset: str, drops: Drops) -> list[Item]:
    """`items` less those whose source row a wordings version excludes (`<subset>_excluded`: source ->
    why), counted as "<subset>/excluded_in_wordings"."""
    kept = [it for it in items if it.source not in excluded]
    if len(kept) < len(items):
        drops.add(subset, "excluded_in_wordings", len(items) - len(kept))
    return kept
