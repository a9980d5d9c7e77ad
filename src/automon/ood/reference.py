"""A monitor's in-distribution reference samples, and what is measured against them.

`reference_split`: the monitor's own training subset's train split (all subsets for the base model),
split into `fit` (the detectors' Gaussian / kNN bank) and `calib` (scored by the monitor too:
standardisation, lambda and the FAR thresholds). `thresholds`: the score thresholds at each reference
FAR budget over benign calibration scores. `fusion_gains`: a fused monitor's detection minus its
judge's, per test subset (automon.monitors.fused is the fused monitor itself).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from automon.metrics import DETECTION_FARS, bootstrap_detection_gain, far_key, threshold_at_far
from automon.ood.fusion import LAMBDA_FAR
from automon.schema import Sample
from automon.subsets import ALL

OPERATING_FAR = far_key(LAMBDA_FAR)  # a fused monitor's pred flags at the 1% reference-FAR threshold


def reference_split(train: Sequence[Sample], subset: str, cap: int, seed: int) -> tuple[list[Sample], list[Sample]]:
    """(fit, calib): per subset and label, a seeded shuffle of the ids in sorted order; the first
    min(cap, n/2) fit the detectors, the next as many calibrate. Same build + seed -> same sets."""
    groups: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for s in train:
        if subset in (ALL, s.subset):
            groups[(s.subset, s.label)].append(s)
    fit: list[Sample] = []
    calib: list[Sample] = []
    for key in sorted(groups):
        rows = sorted(groups[key], key=lambda s: s.id)
        random.Random(f"{seed}:ood:{key[0]}:{key[1]}").shuffle(rows)
        n = min(cap, len(rows) // 2)
        fit += rows[:n]
        calib += rows[n:2 * n]
    return sorted(fit, key=lambda s: s.id), sorted(calib, key=lambda s: s.id)


def thresholds(benign_scores: Sequence[float | None]) -> dict[str, float]:
    """far_key(budget) -> threshold over the finite benign reference scores."""
    b = [float(x) for x in benign_scores if x is not None and not np.isnan(x)]
    return {far_key(t): threshold_at_far(b, t) for t in DETECTION_FARS}


def fusion_gains(judge_rows: Sequence[dict], fused_rows: Sequence[dict], thr_j: Mapping[str, float],
                 thr_f: Mapping[str, float], subsets: Sequence[str], trained_on: str, boot: Any) -> dict[str, Any]:
    """Per test subset (and overall): fused detection rate minus the judge's at each FAR budget, both
    at their own reference thresholds, with pair-bootstrap CIs."""
    out: dict[str, Any] = {}
    for sub in [*subsets, "overall"]:
        idx = [i for i, r in enumerate(judge_rows) if sub == "overall" or r["subset"] == sub]
        if not idx:
            continue
        y = [judge_rows[i]["label"] for i in idx]
        cl = [judge_rows[i]["pair_id"] or judge_rows[i]["id"] for i in idx]
        per = {}
        for t in DETECTION_FARS:
            k = far_key(t)

            def flags(rows: Sequence[dict], th: float) -> list[int]:
                return [int(rows[i]["p_yes"] is not None and rows[i]["p_yes"] >= th) for i in idx]
            per[k] = bootstrap_detection_gain(y, flags(judge_rows, thr_j[k]), flags(fused_rows, thr_f[k]), cl,
                                              n=boot.n, seed=boot.seed, ci=boot.ci)
        out[sub] = {"held_out": sub not in (trained_on, "overall") and trained_on != ALL, **per}
    return out
