"""OOD detectors and fusion inside an evaluation (eval/holdout.py detectors=[...] fusion=...).

For each scored monitor: its in-distribution samples (`reference_split`: the monitor's own training
subset's train split, all subsets for the base model) are split into `fit` (the Gaussian / kNN bank)
and `calib` (scored by the monitor too: standardisation, lambda and the FAR thresholds). The detectors
score calib and the test split; the fused score becomes the monitor "<name>+<fusion>", with its own
prediction rows, so the evaluation writes its metrics, curves, CIs and matrix row like any other.
"""

from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from automon.evaluation.monitors import Monitor
from automon.metrics import DETECTION_FARS, bootstrap_detection_gain, far_key, threshold_at_far
import automon.ood.detectors as D
from automon.ood.registry import DETECTORS, DetectorInputs
from automon.ood.fusion import FUSION_VERSION, LAMBDA_FAR, Standardizer, aggregate, fit_lambda
from automon.schema import Sample
from automon.subsets import ALL
from automon.subsets import names as subset_names

log = logging.getLogger("automon.ood")
OPERATING_FAR = far_key(LAMBDA_FAR)  # a fused monitor's pred flags at the 1% reference-FAR threshold


def training_subset(m: Monitor) -> str:
    """The subset a monitor was trained on (its in-distribution); `all` for the base model. A fused
    twin has its monitor's (Monitor.in_distribution, set by fuse_monitor)."""
    if m.in_distribution is not None:
        return m.in_distribution
    if m.meta is not None and m.meta.subset:
        return m.meta.subset
    return m.label if m.label in (*subset_names(), ALL) else ALL


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


@dataclass
class Fused:
    monitor: Monitor
    judge: str
    rows: list[dict]
    thresholds: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)


def _detector_scores(c: Any, m: Monitor, fit: Sequence[Sample], score_on: Sequence[Sample]) -> dict[str, np.ndarray]:
    inputs = DetectorInputs(c, m, fit, score_on)
    return {name: DETECTORS[name](inputs) for name in c.detectors}


def fuse_monitor(c: Any, m: Monitor, test: Sequence[Sample], test_rows: Sequence[dict], fit: Sequence[Sample],
                 calib: Sequence[Sample], calib_p: Sequence[float | None]) -> Fused:
    """The fused monitor of judge `m` (its test prediction rows and calib P(yes) given)."""
    det = _detector_scores(c, m, fit, [*calib, *test])
    nc = len(calib)
    y_cal = np.array([s.label for s in calib])
    jp_cal = np.array([np.nan if p is None else p for p in calib_p], dtype=float)
    jp_test = np.array([np.nan if r["p_yes"] is None else r["p_yes"] for r in test_rows], dtype=float)
    ok = ~np.isnan(jp_cal)
    benign = ok & (y_cal == 0)
    if benign.sum() < 2 or (ok & (y_cal == 1)).sum() < 1:
        from automon.evaluation.errors import EvalError

        raise EvalError(f"monitor {m.name}: {int(benign.sum())} scored in-distribution benign and "
                        f"{int((ok & (y_cal == 1)).sum())} misbehavior calibration samples; fusion needs >= 2 and >= 1",
                        "ood.cap", "raise ood.cap, or check that the training subset's train split has both labels")
    zj = Standardizer.fit(jp_cal[benign])
    std = {k: Standardizer.fit(v[:nc][benign]) for k, v in det.items()}
    z_cal = [std[k](v[:nc]) for k, v in det.items()]
    z_test = [std[k](v[nc:]) for k, v in det.items()]
    lam, grid_det = 0.0, None
    if c.fusion == "lambda":
        lam, grid_det = fit_lambda(y_cal[ok], zj(jp_cal[ok]), np.mean([z[ok] for z in z_cal], 0))
    f_cal = aggregate(c.fusion, zj(jp_cal), z_cal, lam)
    f_test = aggregate(c.fusion, zj(jp_test), z_test, lam)
    thr = thresholds([v for v, y in zip(f_cal, y_cal) if y == 0])
    rows = []
    for r, v in zip(test_rows, f_test):
        p = None if np.isnan(v) else float(v)
        rows.append({**r, "p_yes": p, "pred": None if p is None else int(p >= thr[OPERATING_FAR]),
                     "raw": None, "mass": None})
    mon = replace(m, name=f"{m.name}+{c.fusion}", label=f"{m.label}+{c.fusion}", mismatches=list(m.mismatches),
                  in_distribution=training_subset(m))
    info = {"version": FUSION_VERSION, "detectors_version": D.DETECTORS_VERSION, "judge": m.name,
            "fusion": c.fusion, "detectors": list(c.detectors), "lambda": lam,
            "lambda_grid_id_detection_at_1pct_far": grid_det, "in_distribution": training_subset(m),
            "n_fit": len(fit), "n_calib": nc, "operating_far": LAMBDA_FAR,
            "standardisation": {"judge": [zj.mean, zj.std], **{k: [s.mean, s.std] for k, s in std.items()}},
            "note": "p_yes holds the fused score (standardised units, not a probability); pred flags at the "
                    "threshold of 1% FAR on the in-distribution calibration benign samples"}
    return Fused(mon, m.name, rows, thr, info)


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


def run_fusion(c: Any, monitors: Sequence[Monitor], test: Sequence[Sample], splits: Mapping[str, tuple],
               preds: Mapping[str, list[dict]], calib_p: Mapping[str, list], ref_thresholds: Mapping[str, dict]
               ) -> tuple[list[Fused], float]:
    """A fused monitor per monitor; returns them and the seconds the detectors and fusion took."""
    t0 = time.perf_counter()
    fused = []
    for m in monitors:
        fit, calib = splits[training_subset(m)]
        f = fuse_monitor(c, m, test, preds[m.name], fit, calib, calib_p[m.name])
        f.info["gain_over_judge"] = fusion_gains(preds[m.name], f.rows, ref_thresholds[m.name], f.thresholds,
                                                 list(c.data.subsets), training_subset(m), c.bootstrap)
        log.info("%s: lambda=%s (%s on %s)", f.monitor.name, f.info["lambda"], c.fusion, training_subset(m))
        fused.append(f)
    return fused, time.perf_counter() - t0
