"""Transformations of the test samples before they are rendered and scored: the seam for stress tests
(paraphrased, truncated, padded, translated responses ...).

A transformation is a pure function Sample -> Sample registered in TRANSFORMS under its name.
`transform(samples, names)` applies the named ones in order and gives each result its own id
(`<id>~<name>`, the pair id likewise), so the prediction cache, predictions.jsonl and the pair
bootstrap keep a stressed sample apart from the original. automon.evaluation.inputs.prepare_inputs
applies them to the test split before rendering; every monitor then scores the stressed samples
exactly as it scores the originals. The evaluation passes no names yet: a stress suite adds the
config key that selects them and passes it to prepare_inputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from automon.schema import Sample

TRANSFORMS: dict[str, Callable[[Sample], Sample]] = {}


def transform(samples: Sequence[Sample], names: Sequence[str]) -> list[Sample]:
    out = list(samples)
    for name in names:
        if name not in TRANSFORMS:
            raise KeyError(f"unknown sample transformation {name!r}; registered: {', '.join(TRANSFORMS) or 'none'}")
        fn = TRANSFORMS[name]
        out = [replace(fn(s), id=f"{s.id}~{name}", pair_id=f"{s.pair_id}~{name}" if s.pair_id else None)
               for s in out]
    return out
