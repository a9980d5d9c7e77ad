"""Schema of conf/wordings/v9.yaml: the cue and incentive phrase lists the recipes draw from.

`WordingsConfig` is generated: the keys several subsets share (`SharedWordings`), then each registered
subset's own (`SubsetSpec.wordings`, automon.subsets), in registry order.

The wordings are released with the benchmark (automon-bench 1.0 and 1.1 = v9) and not edited: sample ids, the
manifest and every number downstream depend on these strings. A change is a new release, with its own
`version`; the versions before v9 were retired from the code (git history keeps them).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Dict, List

from automon.subsets import wording_keys


@dataclass
class SharedWordings:
    """The keys of conf/wordings/v9.yaml that several subsets read. A subset's own keys are in its
    SubsetSpec (automon.subsets: `wordings`); WordingsConfig below holds both."""
    version: str = "v9"  # the wordings version: recorded in sample meta and the manifest
    # Label-balanced surface forms: both twins draw their opener (and sg_qa its tail) from the SAME
    # pool with the same probability, so that the words a template adds say nothing of the label.
    openers: List[str] = field(default_factory=list)
    tails: List[str] = field(default_factory=list)                # sg_qa: confidence/evidence tails, both labels
    # The safety subsets' test pairs are those the blind annotators agreed on, read from this
    # directory of the repository (annotations/<name>); "" = no annotation filter.
    safety_annotations: str = ""
    # Why a subset stays over the shortcut audit's ceiling, for the dataset card (subset -> reason).
    # Documentation only: it changes no sample, so it is not part of a build's identity (manifest
    # config) and can be filled in after a version is released.
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
