"""What a report must say before its numbers: a model with random weights, synthetic data, a small sample.

They go into metrics.json (`caveats`) and open report.md, so that a number copied out of a smoke run
is never mistaken for a finding.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from automon.models.loading import has_random_weights
from automon.schema import Sample

# Fewer twin pairs than this in a test subset: a 95% CI on its MR or FAR is wider than about +-0.2.
SMALL_SAMPLE_PAIRS = 30


def caveats(model: Any, manifest: dict, test: Sequence[Sample], max_pairs_per_subset: int | None) -> list[str]:
    out = []
    if has_random_weights(model.pretrained):
        out.append(f"The model has random weights (model `{model.pretrained}`): these numbers test the machinery; "
                   "they say nothing about how well any monitor works.")
    synthetic = manifest.get("synthetic_sources")
    if synthetic:
        out.append(f"The data are synthetic ({synthetic}), not the benchmark: no finding about real misbehavior "
                   "can come from them.")
    pairs = Counter(s.subset for s in test if s.pair_id)
    pairs = {sub: n // 2 for sub, n in pairs.items()}
    if pairs and min(pairs.values()) < SMALL_SAMPLE_PAIRS:
        sub = min(pairs, key=lambda k: (pairs[k], k))
        out.append(f"Small sample: {sub} has {pairs[sub]} twin pairs (fewer than {SMALL_SAMPLE_PAIRS} in "
                   f"{sum(1 for n in pairs.values() if n < SMALL_SAMPLE_PAIRS)} of {len(pairs)} subsets); "
                   "read the confidence intervals, not the point estimates.")
    if max_pairs_per_subset:
        out.append(f"A subsample: at most {max_pairs_per_subset} pairs per subset of the test set were scored "
                   "(data.max_pairs_per_subset).")
    return out
