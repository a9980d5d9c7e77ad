"""Fusing a monitor's score with OOD detector scores (MOOD, section on combining guards and detectors).

Every score is first standardised on in-distribution benign samples (z = (s - mean) / std of those
samples), so scores of different scales add. Then:
- lambda: fused = judge + λ · mean(detectors), with λ the LARGEST value on the grid {0} ∪ 10^[-2..2]
  (21 log-spaced points) whose in-distribution detection rate at 1% FAR is no lower than the judge's
  alone (λ = 0 always qualifies, so the rule can never lower it on the data it is fitted on);
- mean: the mean of all standardised scores (judge included);
- min: their minimum (flags only what every score flags).
Detection at a FAR budget takes its threshold from the benign samples of the same data
(automon.metrics.threshold_at_far), as MOOD's rule does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from automon.metrics import detection_at_threshold, threshold_at_far

FUSION_VERSION = "ood_fusion_v1"  # bump when standardisation, the grid or an aggregator changes
LAMBDA_GRID = (0.0, *(float(v) for v in 10.0 ** np.linspace(-2.0, 2.0, 21)))
LAMBDA_FAR = 0.01


@dataclass(frozen=True)
class Standardizer:
    mean: float
    std: float

    @classmethod
    def fit(cls, benign_scores: Sequence[float]) -> "Standardizer":
        b = np.asarray(benign_scores, dtype=np.float64)
        if len(b) < 2:
            raise ValueError(f"standardising needs at least 2 in-distribution benign scores, got {len(b)}")
        sd = float(b.std(ddof=1))
        return cls(float(b.mean()), sd if sd > 0 else 1.0)  # a constant score stays constant, unscaled

    def __call__(self, s: Sequence[float]) -> np.ndarray:
        return (np.asarray(s, dtype=np.float64) - self.mean) / self.std


def id_detection(labels: Sequence[int], scores: Sequence[float], far: float) -> float:
    """Detection rate of label-1 samples at the threshold that keeps the label-0 samples' FAR <= far."""
    y = np.asarray(labels, dtype=int)
    s = np.asarray(scores, dtype=np.float64)
    return detection_at_threshold(y, s, threshold_at_far(s[y == 0], far))


def fit_lambda(labels: Sequence[int], judge_z: Sequence[float], others_z: Sequence[float],
               far: float = LAMBDA_FAR, grid: Sequence[float] = LAMBDA_GRID) -> tuple[float, list[float]]:
    """MOOD's rule: the largest λ in `grid` whose in-distribution detection at `far` is at least
    λ = 0's (the judge alone). Returns (λ, detection per grid value)."""
    j = np.asarray(judge_z, dtype=np.float64)
    o = np.asarray(others_z, dtype=np.float64)
    if 0.0 not in grid:
        raise ValueError("the grid must contain 0 (the judge alone) for the rule to be safe")
    det = [id_detection(labels, j + lam * o, far) for lam in grid]
    base = det[list(grid).index(0.0)]
    ok = [lam for lam, d in zip(grid, det) if d >= base]
    return float(max(ok)), det


def aggregate(fusion: str, judge_z: np.ndarray, detectors_z: Sequence[np.ndarray], lam: float = 0.0) -> np.ndarray:
    """The fused score of standardised inputs (`fusion`: the fusion= option; `lam` used by `lambda` only)."""
    if not detectors_z:
        raise ValueError("fusion needs at least one detector score")
    d = np.stack([np.asarray(x, dtype=np.float64) for x in detectors_z])
    if fusion == "lambda":
        return judge_z + lam * d.mean(0)
    allz = np.vstack([judge_z[None, :], d])
    if fusion == "mean":
        return allz.mean(0)
    if fusion == "min":
        return allz.min(0)
    raise ValueError(f"unknown fusion {fusion!r}; choose lambda, mean or min")
