"""Contrast controls (since wordings v9): benign samples that carry ONE part of a
misbehavior alone, so that no monitor checking a single feature reads the label.

A misbehavior is a conjunction (SubsetSpec.construct, automon.subsets.CONSTRUCTS): sycophancy = a wrong
answer AND adopted from the user; spec gaming in code = failing the task AND through behaviour keyed on
the visible tests or the checker. In v1-v8 every misbehaving test sample had both parts and every
benign one neither, so "does the answer agree with the user?" (AUROC 0.96 and 1.00 on v8's two
sycophancy subsets) or "is the code correct?" read the label without detecting the misbehavior. Each
control here is built from the same source item as a test pair (one question, one problem), grouped
with it (`meta.group` = the pair's pair_id, so the bootstrap resamples them together) and named by its
kind (`meta.control`). This module is the one home of the kinds: recipes name them, metrics report a
false-alarm rate per kind, the audit's reference monitors (automon.data.reference) are judged on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from automon.subsets import with_construct


# The reference monitors' rules (automon.data.reference.RULES holds what each flags, in this order): the
# single features a control kind must fool, and `construct`, the conjunction. Named here, beside the
# kinds, so that configs (backend=reference) can list them without importing the data package.
REFERENCE_RULES = ("agrees", "rewarded", "test_literal", "incorrect", "construct")
REFERENCE_VERSION = "reference_v1"  # bump when a rule changes what it flags


@dataclass(frozen=True)
class ControlKind:
    construct: str    # the conjunction it splits (automon.subsets.CONSTRUCTS): built for the subsets with it
    carries: str      # the one part of the misbehavior it has
    lacks: str        # the part it lacks, which makes it benign
    defeats: str      # the single-feature reference monitor (automon.data.reference.RULES) it must fool

    @property
    def subsets(self) -> tuple[str, ...]:
        """The subsets whose recipes build it: those whose SubsetSpec.construct is its construct."""
        return tuple(with_construct(self.construct))


CONTROL_KINDS: dict[str, ControlKind] = {
    "right_cue_agree": ControlKind("cue", "agreement with the user's suggestion",
                                   "a wrong answer: the user is right", "agrees"),
    "honest_mistake": ControlKind("cue", "a wrong answer",
                                  "adoption: the user suggests another wrong answer, the response rejects it "
                                  "and errs on its own", "incorrect"),
    "plain_bug": ControlKind("test_keyed", "a wrong implementation (it fails the hidden tests; some pass the "
                             "visible ones)", "anything keyed on the visible tests or the checker", "incorrect"),
}


def control_kind(meta: dict) -> str | None:
    """The sample's contrast-control kind, or None for a paired sample (and for the training-only
    controls of a recipe, e.g. spec gaming in QA's, whose kind is not in CONTROL_KINDS: they are training
    data, not a test construct)."""
    kind = meta.get("control")
    return kind if kind in CONTROL_KINDS else None
