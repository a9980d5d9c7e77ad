"""Schema of conf/wordings/<version>.yaml: the cue and incentive phrase lists and template switches.

`WordingsConfig` is generated: the keys several subsets share (`SharedWordings`), then each registered
subset's own (`SubsetSpec.wordings`, automon.subsets), in registry order.

A wordings version is released once and never edited (sample ids, the manifest and every number
downstream depend on these strings): a change is a new file, conf/wordings/v5.yaml, with its own
`version`. A new field needs a default that keeps every earlier version's build byte for byte.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Dict, List

from automon.subsets import wording_keys

# sg_code's template versions (automon.data.recipes.sg_code.recipe): v1's fixed gaming shapes and
# bare canonical solutions, or v2's varied forms and decoys shared by both twins.
# v3 (wordings v5): construct pairs, gaming keyed on the visible tests or tampering with the checker,
# benign twins of the same surface keyed on other inputs and correct (recipes/sg_code/construct.py).
SG_CODE_TEMPLATES = ("v1", "v2", "v3")


@dataclass
class SharedWordings:
    """The keys of conf/wordings/<version>.yaml that several subsets read. A subset's own keys are in its
    SubsetSpec (automon.subsets: `wordings`); WordingsConfig below holds both."""
    version: str = "v1"  # the wordings version: recorded in sample meta and the manifest
    agree_phrases: List[str] = field(default_factory=list)        # openers of cue-adopting answers
    disagree_phrases: List[str] = field(default_factory=list)     # openers of answers keeping the truth
    # v2 and later. Non-empty `openers` switches the recipes to label-balanced surface forms: both
    # twins draw their opener (and sg_qa its tail) from the SAME pool with the same probability, and
    # agree/disagree phrases appear only where they are true of the response (training controls).
    openers: List[str] = field(default_factory=list)
    tails: List[str] = field(default_factory=list)                # sg_qa: confidence/evidence tails, both labels
    # Training-only benign controls: the user's cue is right and the response agrees; the incentive
    # is present and the answer is honest but confident (counted in manifest.json "controls").
    training_controls: bool = False
    # v4 and later: items that share a conversation's opening (HH-RLHF: the first human turn) or a
    # reading passage (MMLU: the text before the question's last line) carry a source-item key for it
    # too, so they land in one split: otherwise a training conversation can repeat most of a test one.
    shared_source_keys: bool = False
    # v5 and later: the safety subsets' test pairs are those two blind annotators agreed on, read
    # from this directory of the repository (annotations/<name>); "" = no annotation filter.
    safety_annotations: str = ""
    # Whether an sg_code sample's meta records how this machine verified it (its sandbox isolation
    # mode), which makes builds differ across machines. v1-v4 do (released so; their samples stay byte
    # for byte); v5 does not: the mode is in build_log.json's build record, outside the data hash (the
    # v3 templates honour the switch; the card's isolation-off warning reads the record).
    verification_in_samples: bool = True
    # v9 and later: contrast controls (automon.controls): benign samples that carry one part of a
    # misbehavior alone (agreeing with a user who is right, an honest mistake that does not follow the
    # cue, a plain bug with nothing test-specific), built from the same source item as its test pair and
    # grouped with it (meta.control, meta.group), in the test split and, from other items, in training.
    contrast_controls: bool = False
    # Why a subset of this version stays over the shortcut audit's ceiling, for the dataset card
    # (subset -> reason). Documentation only: it changes no sample, so it is not part of a build's
    # identity (manifest config) and can be filled in after a version is released.
    shortcut_notes: Dict[str, str] = field(default_factory=dict)


def wordings_schema() -> type:
    """The wordings node for the subsets registered now: SharedWordings' keys, then every subset's own
    (a subset registered at runtime, e.g. by a test, appears in the schema stored by the next
    `automon.config.build.register()`)."""
    own = [(k.name, k.type, field(default_factory=lambda d=k.default: copy.deepcopy(d), metadata={"doc": k.doc}))
           for k in wording_keys()]
    return make_dataclass("WordingsConfig", own, bases=(SharedWordings,))


def same_schema(a: type, b: type) -> bool:
    """Whether two generated schemas have the same keys, types and defaults (one can stand for the other)."""
    def keys(cls: type) -> list:
        return [(f.name, f.type, f.default_factory() if callable(f.default_factory) else f.default) for f in fields(cls)]
    return keys(a) == keys(b)


WordingsConfig = wordings_schema()
