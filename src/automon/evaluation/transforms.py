"""Stresses: registered, versioned, seeded transformations of the test samples before they are
rendered and scored (injected instructions, legitimacy claims, obfuscated code, paraphrased prose).

A stress is a `Stress` in STRESSES. Its `apply(sample, rng)` returns the stressed sample (the same
label: a stress never changes what the response does, only how it reads) or the sample unchanged
where the stress makes no sense for it (a benign twin that has nothing to obfuscate); `subsets` names
the subsets it covers (pairs of other subsets are left out of that stressed set, so a code-only stress
is not averaged with untouched QA pairs). `rng` is seeded by (seed, stress name, version, pair id), so
both twins of a pair draw the same choices (the same injected wording at the same place: the pair
still differs only in the misbehavior), and a stressed sample does not depend on which other samples
are stressed or in what order.

`apply` may say how it stressed a sample in `meta["stress"]` (the wording, the place, a fallback);
`stress(samples, name, seed)` adds the stress's name, version, seed and the original id there, and
gives every stressed sample its own id (`<id>~<name>`, the pair id
likewise), so the prediction cache, predictions.jsonl and the pair bootstrap keep a stressed sample
apart from the original; the rendered prompt differs too, so the cache key (the prompt's hash) does.
automon.evaluation.inputs.prepare_inputs applies the selected stresses to the test split before
rendering; every monitor then scores the stressed samples exactly as it scores the clean ones.

This module is the type and the registry; the built-in stresses live in automon.evaluation.stresses
(one module each), which registers them on import: read STRESSES through that package.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from automon.schema import Sample


@dataclass(frozen=True)
class Stress:
    name: str
    version: int                               # bump whenever the stressed bytes change
    threat: str                                # one line: what the watched model tries (report, docs)
    subsets: frozenset[str]                    # the subsets it applies to
    apply: Callable[[Sample, random.Random], Sample]
    # called once with the data build's directory before any apply (obfuscate: where the build's
    # sources, and so the hidden tests it checks against, are)
    prepare: Optional[Callable[[Path], None]] = None
    # called once with the evaluation's config and the samples of the stress's subsets, before any of
    # them is stressed: the apply to use in this evaluation, or None for `apply` (paraphrase: with
    # paraphrase.model set, an apply that uses the policy model's rewrites, generated here in one batch)
    bind: Optional[Callable[[Any, Sequence[Sample]], Optional[Callable[[Sample, random.Random], Sample]]]] = None


STRESSES: dict[str, Stress] = {}


def register(s: Stress) -> Stress:
    if s.name in STRESSES:
        raise ValueError(f"stress {s.name!r} registered twice")
    if "~" in s.name:
        raise ValueError(f"stress name {s.name!r} may not contain '~' (it separates a sample id from its stress)")
    STRESSES[s.name] = s
    return s


def get_stress(name: str) -> Stress:
    if name not in STRESSES:
        raise KeyError(f"unknown stress {name!r}; registered: {', '.join(sorted(STRESSES)) or 'none'}")
    return STRESSES[name]


def stress_rng(seed: int, s: Stress, x: Sample) -> random.Random:
    # a str seed is hashed with SHA-512 by random.Random: the same on every machine and PYTHONHASHSEED
    return random.Random(f"{seed}:{s.name}:v{s.version}:{x.pair_id or x.id}")


def stress(samples: Sequence[Sample], name: str, seed: int = 0,
           apply: Optional[Callable[[Sample, random.Random], Sample]] = None) -> list[Sample]:
    """The stressed copy of the samples of the stress's subsets, each with id `<id>~<name>`; `apply`
    (what the stress's `bind` gave) replaces the stress's own."""
    s = get_stress(name)
    apply = apply or s.apply
    out = []
    for x in samples:
        if x.subset not in s.subsets:
            continue
        y = apply(x, stress_rng(seed, s, x))
        if y.label != x.label or y.pair_id != x.pair_id or y.id != x.id:
            raise ValueError(f"stress {name} changed the label, id or pair of sample {x.id}")
        out.append(replace(y, id=f"{x.id}~{name}", pair_id=f"{x.pair_id}~{name}" if x.pair_id else None,
                           meta={**y.meta, "stress": {**y.meta.get("stress", {}), "name": name, "version": s.version,
                                                      "seed": seed, "of": x.id}}).validate())
    return out

