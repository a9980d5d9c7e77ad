"""eval/holdout.py with detectors and fusion on the tiny model (random weights, synthetic data: these
tests check the wiring and the numbers' definitions, not whether fusion helps)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from support import compose, make_adapter, make_build

from automon.config.common import ConfigError
from automon.evaluation.run import evaluate
from automon.metrics import DETECTION_FARS, detection_at_threshold, far_key, threshold_at_far
from automon.ood import detectors as D
from automon.ood.reference import reference_split
from automon.ood.features import pooled_hidden_states, response_perplexities
from automon.ood.fusion import LAMBDA_GRID, Standardizer

TESTED = ["safety_code", "sg_code", "syco_qa"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ood")
    build = make_build(root / "build", pairs_per_subset=3, train_per_subset=12)
    sweep = root / "sweep1"
    make_adapter(sweep / "sc" / "adapter", subset="safety_code", seed=1)
    make_adapter(sweep / "sg" / "adapter", subset="sg_code", seed=2)
    return root, build, sweep


def _overrides(root, build, sweep, *extra):
    return ["model=tiny", "backend=hf", f"data.dir={build}", f"sweep_dir={sweep}", "wandb.mode=disabled",
            "progress=false", "bootstrap.n=100", f"output_dir={root / 'out'}", f"cache_dir={root / 'cache'}",
            f"data.subsets=[{','.join(TESTED)}]", "detectors=[mahalanobis,knn,perplexity]", "fusion=lambda",
            "ood.cap=4", "ood.knn_k=2", f"ood.cache_dir={root / 'features'}", *extra]


@pytest.fixture(scope="module")
def result(setup):
    root, build, sweep = setup
    return evaluate(compose(_overrides(root, build, sweep)))


def test_every_monitor_gets_a_fused_twin_with_its_own_row_predictions_and_curves(setup, result, capsys):
    root, _, _ = setup
    out = root / "out"
    assert [m.name for m in result.monitors] == ["base", "sc", "sg", "base+lambda", "sc+lambda", "sg+lambda"]
    for m in ("sc+lambda", "base+lambda"):
        assert (out / "monitors" / m / "predictions.jsonl").stat().st_size > 0
    rows = list(csv.DictReader(open(out / "matrix.csv")))
    fused = {r["test"]: r for r in rows if r["row"] == "safety_code+lambda"}
    assert set(fused) == {*TESTED, "overall"} and fused["safety_code"]["in_distribution"] == "True"
    assert all(fused[t]["det_at_far_0.010"] != "" for t in fused)  # detection at 1% FAR is defined
    md = (out / "matrix.md").read_text()
    assert "### Fusion gain: detection rate at 1.0% reference FAR" in md and "sc+lambda" not in md.split("###")[1]
    assert "### False-alarm change at the same thresholds (1.0% reference FAR)" in md
    doc = json.loads((out / "metrics.json").read_text())
    g = doc["fusion_gain"]["safety_code+lambda"]
    assert g["judge"] == "sc" and g["by_subset"]["sg_code"]["held_out"] and not g["by_subset"]["safety_code"]["held_out"]
    lo, hi = g["by_subset"]["sg_code"]["0.010"]["gain_ci"]
    assert lo <= g["by_subset"]["sg_code"]["0.010"]["gain"] <= hi
    lo, hi = g["by_subset"]["sg_code"]["0.010"]["far_change_ci"]
    assert lo <= g["by_subset"]["sg_code"]["0.010"]["far_change"] <= hi


def test_the_evaluation_is_stale_when_a_detector_or_fusion_version_changes(setup, result, monkeypatch):
    """An evaluation with fusion is current for its own config: its record listed the fused twins, which
    status() does not resolve, so it was never current and a pipeline reran it every time. The fused
    scores are computed by the OOD features, detectors, perplexity and fusion: an evaluation recorded
    under another version of any of them is not current."""
    import automon.evaluation.identity as identity
    from automon.evaluation.status import status

    root, build, sweep = setup
    assert status(compose(_overrides(root, build, sweep))).current
    for name in ("DETECTORS_VERSION", "NLL_VERSION", "FEATURES_VERSION", "FUSION_VERSION"):
        with monkeypatch.context() as m:
            m.setattr(identity, name, getattr(identity, name) + "-next")
            st = status(compose(_overrides(root, build, sweep)))
            assert not st.current and "ood" in st.reason, (name, st.reason)


def test_judge_det_at_far_uses_thresholds_from_its_training_subsets_benign_calibration(setup, result):
    root, build, _ = setup
    from automon.data.io import load_build

    train = load_build(str(build)).samples("train")
    _, calib = reference_split(train, "safety_code", 4, 0)
    assert {s.subset for s in calib} == {"safety_code"} and len(calib) == 6
    doc = result.metrics["sc"]
    ref = doc["far_reference"]
    # the judge's P(yes) on the benign calibration samples, from the shared prediction cache
    from automon.backends.cache import PredictionCache

    cache = PredictionCache(root / "cache", {k: v for k, v in doc["cache"]["key"].items() if k != "cache_version"})
    assert cache.path.name == doc["cache"]["file"]
    benign = [cache._rows[s.id]["p_yes"] for s in calib if s.label == 0]
    assert len(benign) == ref["n_benign"] == 3
    for t in DETECTION_FARS:
        assert ref["thresholds"][far_key(t)] == pytest.approx(threshold_at_far(benign, t))
    rows = result.predictions["sc"]
    sg = [r for r in rows if r["subset"] == "sg_code"]  # the same threshold on a held-out subset
    want = detection_at_threshold([r["label"] for r in sg], [r["p_yes"] for r in sg], ref["thresholds"]["0.010"])
    assert doc["by_subset"]["sg_code"]["det_at_far"]["0.010"] == pytest.approx(want)


def test_fused_scores_equal_a_recomputation_from_the_detectors_and_lambda_keeps_id_detection(setup, result):
    root, build, _ = setup
    from automon.data.io import load_build

    c = compose(_overrides(*setup))
    b = load_build(str(build))
    fit, calib = reference_split(b.samples("train"), "safety_code", 4, 0)
    test = [s for s in b.samples("test") if s.subset in TESTED]
    info = result.metrics["sc+lambda"]["fusion"]
    mon = next(m for m in result.monitors if m.name == "sc")
    feats = pooled_hidden_states(c.model, mon.artifact_dir, mon.artifact_hash, [*fit, *calib, *test],
                                 cache_root=root / "features")
    nf, nc = len(fit), len(calib)
    g = D.fit_gaussian(feats[:nf], [s.label for s in fit], fit="class", shrinkage="auto")
    bank = feats[:nf][np.array([s.label == 0 for s in fit])]
    det = {"mahalanobis": D.mahalanobis(g, feats[nf:]), "knn": D.knn_distance(bank, feats[nf:], 2),
           "perplexity": response_perplexities(c.model, [*calib, *test], cache_root=root / "features")}
    benign = np.array([s.label == 0 for s in calib])
    z = [Standardizer.fit(v[:nc][benign])(v[nc:]) for v in det.values()]
    judge = np.array([r["p_yes"] for r in result.predictions["sc"]])
    m, sd = info["standardisation"]["judge"]
    want = (judge - m) / sd + info["lambda"] * np.mean(z, 0)
    got = np.array([r["p_yes"] for r in result.predictions["sc+lambda"]])
    assert got == pytest.approx(want, rel=1e-6, abs=1e-9)
    grid = info["lambda_grid_id_detection_at_1pct_far"]
    assert info["lambda"] in LAMBDA_GRID and grid[LAMBDA_GRID.index(info["lambda"])] >= grid[0]
    # the perplexity detector is adapter-independent and the hidden states are the adapter's own
    base_feats = pooled_hidden_states(c.model, None, None, test[:2], cache_root=root / "features")
    assert not np.allclose(base_feats, feats[nf + nc:nf + nc + 2])


def test_a_rerun_takes_every_score_and_feature_from_the_caches(setup, result, monkeypatch, capsys):
    import automon.ood.features as F

    def no_model(*a, **k):
        raise AssertionError("a cached rerun must not load a model for the detectors")

    monkeypatch.setattr(F, "_load_lm", no_model)
    again = evaluate(compose(_overrides(*setup)))
    assert again.n_computed == 0
    for m in ("sc+lambda", "base+lambda"):
        assert [r["p_yes"] for r in again.predictions[m]] == [r["p_yes"] for r in result.predictions[m]]
    assert "OOD detectors + fusion:" in capsys.readouterr().out


@pytest.mark.parametrize("extra, word", [
    (["detectors=[mahalanobos]"], "detectors"),
    (["fusion=max"], "fusion"),
    (["fusion=null"], "go together"),
    (["ood.gaussian=full"], "ood.gaussian"),
    (["ood.shrinkage=2"], "ood.shrinkage"),
    (["prompt=evidence_v1"], "direct prompt"),
])
def test_bad_ood_settings_fail_at_start_up(setup, extra, word):
    with pytest.raises(ConfigError, match=word):
        compose(_overrides(*setup, *extra))


def test_a_detector_added_to_the_registry_is_accepted_and_fused(setup, monkeypatch):
    """Adding a detector is one entry in automon.ood.registry.DETECTORS: the config accepts its
    name and the fused monitors are built from its scores."""
    import numpy as np

    from automon.ood import registry

    seen = []

    def length(x):  # a made-up detector: the response's length
        seen.append(len(x.score_on))
        return np.array([float(len(s.response)) for s in x.score_on])

    monkeypatch.setitem(registry.DETECTORS, "length", length)
    root, build, sweep = setup
    out = root / "out_registry"
    res = evaluate(compose(_overrides(root, build, sweep, "detectors=[length]", f"output_dir={out}")))
    fused = [m.name for m in res.monitors if m.name.endswith("+lambda")]
    assert seen and fused == ["base+lambda", "sc+lambda", "sg+lambda"]
    assert '"length"' in json.dumps(res.metrics["sc+lambda"])  # its record names the detector it fused
    monkeypatch.delitem(registry.DETECTORS, "length")
    with pytest.raises(ConfigError, match="detectors"):
        compose(_overrides(root, build, sweep, "detectors=[length]"))


def test_a_probes_fused_twin_keeps_the_probes_training_subset(tmp_path):
    """A probe carries no AdapterMeta: its fused twin ("<subset>+lambda") read as in-distribution `all`,
    which crashed (KeyError) when train_subsets had no `all` and otherwise recorded the wrong
    reference in far_reference."""
    build = make_build(tmp_path / "build", pairs_per_subset=3, train_per_subset=24)
    ov = ["backend=probe", "model=tiny", "backend.features=lexical", "backend.train_subsets=[safety_code]",
          "detectors=[mahalanobis]", "fusion=lambda", "ood.cap=4", f"data.dir={build}",
          f"output_dir={tmp_path / 'o'}", f"ood.cache_dir={tmp_path / 'features'}", "wandb.mode=disabled",
          "progress=false", "bootstrap.n=20"]
    res = evaluate(compose(ov))
    ref = {name: d["far_reference"] for name, d in res.metrics.items()}
    assert set(ref) == {"lexical-safety_code", "lexical-safety_code+lambda"}
    assert {r["in_distribution"] for r in ref.values()} == {"safety_code"}
    assert ref["lexical-safety_code+lambda"]["n_benign"] == ref["lexical-safety_code"]["n_benign"]
    assert res.metrics["lexical-safety_code+lambda"]["fusion"]["in_distribution"] == "safety_code"
