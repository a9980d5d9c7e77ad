"""The OOD detectors, one registry: name -> the function that scores samples with it.

Each entry reads `DetectorInputs` (the monitor, its in-distribution `fit` samples, the samples to
score and the `ood` settings) and returns one score per sample to score, higher = further from
in-distribution. Features several detectors share (the pooled hidden states) are computed once per
monitor. Adding a detector: its scoring function in detectors.py and one entry here; the config's
`detectors=[...]` check, the fused monitors and docs/evaluation.md's list follow from DETECTORS.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import automon.ood.detectors as D
from automon.ood.features import pooled_hidden_states, response_perplexities


class DetectorInputs:
    """What a detector may read, its features computed on first use."""

    def __init__(self, c: Any, monitor: Any, fit: Sequence, score_on: Sequence):
        self.c, self.o, self.monitor, self.fit, self.score_on = c, c.ood, monitor, fit, score_on
        self.cache_root = Path(self.o.cache_dir) if self.o.cache_dir else None

    @cached_property
    def hidden_states(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean-pooled hidden states of request + response under the monitor's own weights (a LoRA
        monitor's adapter applied; a probe's directory is no adapter): (fit, score_on)."""
        m, o = self.monitor, self.o
        lora = m.lora is not None
        feats = pooled_hidden_states(self.c.model, m.artifact_dir if lora else None, m.artifact_hash if lora else None,
                                     [*self.fit, *self.score_on], o.layer, o.pooling, max_length=o.max_length,
                                     batch_size=o.batch_size, cache_root=self.cache_root)
        return feats[:len(self.fit)], feats[len(self.fit):]


def _mahalanobis(x: DetectorInputs) -> np.ndarray:
    """Distance to the in-distribution Gaussian(s) (`ood.gaussian`: per class or benign only)."""
    fit, on = x.hidden_states
    shrink = x.o.shrinkage if x.o.shrinkage == "auto" else float(x.o.shrinkage)
    g = D.fit_gaussian(fit, [s.label for s in x.fit], fit=x.o.gaussian, shrinkage=shrink)
    return D.mahalanobis(g, on)


def _knn(x: DetectorInputs) -> np.ndarray:
    """Distance to the k-th nearest in-distribution BENIGN sample: distance from "normal"."""
    fit, on = x.hidden_states
    bank = fit[np.array([s.label == 0 for s in x.fit])]
    return D.knn_distance(bank, on, min(x.o.knn_k, len(bank)))


def _perplexity(x: DetectorInputs) -> np.ndarray:
    """The response's perplexity under the base model, given the request."""
    return response_perplexities(x.c.model, x.score_on, max_length=x.o.ppl_max_length,
                                 batch_size=max(1, x.o.batch_size // 2), cache_root=x.cache_root)


DETECTORS: dict[str, Callable[[DetectorInputs], np.ndarray]] = {
    "mahalanobis": _mahalanobis,
    "knn": _knn,
    "perplexity": _perplexity,
}
