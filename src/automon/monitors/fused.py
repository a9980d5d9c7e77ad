"""A fused monitor (MOOD's recipe): another monitor's score fused with OOD detector scores.

`FusedMonitor` wraps a monitor (its "judge": the base model, an adapter, a probe). On the judge's
in-distribution reference samples (automon.ood.reference.reference_split) the detectors fit on
`fit`, and on `calib` every score is standardised on the benign samples, lambda is chosen
(automon.ood.fusion) and the thresholds at each reference FAR are set. Its prediction carries the
fused score in its own field (`Prediction.fused`, standardised units, not a probability); it flags
at the 1%-FAR threshold of its calibration benign samples. The evaluation writes its predictions,
metrics, curves and matrix row ("<row>+<fusion>") like any other monitor's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import automon.ood.detectors as D
from automon.errors import UserError
from automon.monitors.base import Monitor, Prediction, Rendered
from automon.backends.base import LoraAdapter
from automon.ood.fusion import FUSION_VERSION, LAMBDA_FAR, Standardizer, aggregate, fit_lambda
from automon.ood.reference import OPERATING_FAR, thresholds
from automon.ood.registry import DETECTORS, DetectorInputs
from automon.schema import Sample

NOTE = ("p_yes holds the fused score (standardised units, not a probability); pred flags at the threshold of 1% "
        "FAR on the in-distribution calibration benign samples")


@dataclass(eq=False)
class FusedMonitor(Monitor):
    judge: Monitor | None = None                  # the monitor whose score is fused
    settings: Any = None                          # fusion=, detectors=, ood.*, model= (the evaluation config)
    fit_samples: list[Sample] = field(default_factory=list)   # in-distribution: the detectors fit on these
    calib: list[Rendered] = field(default_factory=list)       # in-distribution: standardisation, lambda, thresholds
    # The judge's predictions (the evaluation passes its cached scoring, so nothing is asked twice).
    judge_scores: Callable[[Sequence[Rendered]], list[Prediction]] | None = field(default=None, repr=False)
    thresholds: dict[str, float] = field(default_factory=dict)  # far_key -> fused threshold, set by score()
    info: dict[str, Any] = field(default_factory=dict)          # metrics.json "fusion", set by score()

    @classmethod
    def around(cls, judge: Monitor, settings: Any, fit: Sequence[Sample], calib: Sequence[Rendered],
               judge_scores: Callable[[Sequence[Rendered]], list[Prediction]] | None = None) -> "FusedMonitor":
        return cls(name=f"{judge.name}+{settings.fusion}", row=f"{judge.row}+{settings.fusion}",
                   artifact_dir=judge.artifact_dir, artifact_hash=judge.artifact_hash, rank=judge.rank, meta=judge.meta,
                   mismatches=list(judge.mismatches), judge=judge, settings=settings, fit_samples=list(fit),
                   calib=list(calib), judge_scores=judge_scores or judge.score)

    @property
    def in_distribution(self) -> str:
        return self.judge.in_distribution  # type: ignore[union-attr]

    @property  # type: ignore[override]
    def monitor_kind(self) -> str:  # a fused probe is still a probe in metrics.json and report titles
        return self.judge.monitor_kind  # type: ignore[union-attr]

    @property
    def lora(self) -> LoraAdapter | None:
        return self.judge.lora  # type: ignore[union-attr]

    def describe(self) -> dict[str, Any]:
        return {**self.judge.describe(), "name": self.name, "label": self.row}  # type: ignore[union-attr]

    def score(self, items: Sequence[Rendered]) -> list[Prediction]:
        """Fit on the reference samples and score `items` in one pass (the detectors read the
        calibration and scored samples' features together)."""
        c, calib = self.settings, [r.sample for r in self.calib]
        cal_p = self.judge_scores(self.calib)  # type: ignore[misc]
        test_p = self.judge_scores(items)  # type: ignore[misc]
        inputs = DetectorInputs(c, self.judge, self.fit_samples, [*calib, *(r.sample for r in items)])
        det = {name: DETECTORS[name](inputs) for name in c.detectors}
        nc = len(calib)
        y_cal = np.array([s.label for s in calib])
        jp_cal = np.array([np.nan if p.p_yes is None else p.p_yes for p in cal_p], dtype=float)
        jp_test = np.array([np.nan if p.p_yes is None else p.p_yes for p in test_p], dtype=float)
        ok = ~np.isnan(jp_cal)
        benign = ok & (y_cal == 0)
        if benign.sum() < 2 or (ok & (y_cal == 1)).sum() < 1:
            raise UserError(f"monitor {self.judge.name}: {int(benign.sum())} scored in-distribution benign and "  # type: ignore[union-attr]
                            f"{int((ok & (y_cal == 1)).sum())} misbehavior calibration samples; fusion needs >= 2 "
                            "and >= 1", "ood.cap",
                            "raise ood.cap, or check that the training subset's train split has both labels")
        zj = Standardizer.fit(jp_cal[benign])
        std = {k: Standardizer.fit(v[:nc][benign]) for k, v in det.items()}
        z_cal = [std[k](v[:nc]) for k, v in det.items()]
        z_test = [std[k](v[nc:]) for k, v in det.items()]
        lam, grid_det = 0.0, None
        if c.fusion == "lambda":
            lam, grid_det = fit_lambda(y_cal[ok], zj(jp_cal[ok]), np.mean([z[ok] for z in z_cal], 0))
        f_cal = aggregate(c.fusion, zj(jp_cal), z_cal, lam)
        f_test = aggregate(c.fusion, zj(jp_test), z_test, lam)
        self.thresholds = thresholds([v for v, y in zip(f_cal, y_cal) if y == 0])
        self.info = {"version": FUSION_VERSION, "detectors_version": D.DETECTORS_VERSION,
                     "judge": self.judge.name, "fusion": c.fusion, "detectors": list(c.detectors),  # type: ignore[union-attr]
                     "lambda": lam, "lambda_grid_id_detection_at_1pct_far": grid_det,
                     "in_distribution": self.in_distribution, "n_fit": len(self.fit_samples), "n_calib": nc,
                     "operating_far": LAMBDA_FAR,
                     "standardisation": {"judge": [zj.mean, zj.std], **{k: [s.mean, s.std] for k, s in std.items()}},
                     "note": NOTE}
        return [Prediction(error=p.error, fused=None if np.isnan(v) else float(v)) for p, v in zip(test_p, f_test)]

    def flag(self, p: Prediction) -> int | None:
        return None if p.fused is None else int(p.fused >= self.thresholds[OPERATING_FAR])
