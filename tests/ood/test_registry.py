"""Adding an OOD detector is its scoring function and one entry in automon.ood.registry.DETECTORS:
the config's `detectors=[...]` check, the fused monitors and their metrics follow from the registry."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import compose, make_build

from automon.config.common import ConfigError
from automon.evaluation.run import evaluate
from automon.ood.registry import DETECTORS, DetectorInputs


def _response_length(x: DetectorInputs) -> np.ndarray:
    """A detector the package has never seen: longer responses are further from in-distribution."""
    return np.array([len(s.response) for s in x.score_on], dtype=float)


def test_a_detector_registered_in_detectors_is_accepted_and_fused(tmp_path, monkeypatch):
    build = make_build(tmp_path / "build", pairs_per_subset=2, train_per_subset=8)
    ov = ["model=tiny", "backend=hf", "data.subsets=[sg_code,syco_qa]", f"data.dir={build}",
          f"output_dir={tmp_path / 'out'}", "bootstrap.n=20", "wandb.mode=disabled", "progress=false",
          "detectors=[response_length]", "fusion=mean", "ood.cap=4"]
    with pytest.raises(ConfigError, match="response_length"):
        compose(ov)
    monkeypatch.setitem(DETECTORS, "response_length", _response_length)
    res = evaluate(compose(ov))
    assert [m.name for m in res.monitors] == ["base", "base+mean"]
    assert res.metrics["base+mean"]["fusion"]["detectors"] == ["response_length"]
    doc = json.loads((tmp_path / "out" / "monitors" / "base+mean" / "metrics.json").read_text())
    assert doc["fusion"]["detectors"] == ["response_length"]
    assert all(r["p_yes"] is not None for r in res.predictions["base+mean"])
