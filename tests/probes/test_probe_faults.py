"""Probes under faults: each bad setting or damaged file ends in one error line before the encoder or
the fit runs (seed, layer, an unwritable cache), or in a probe fitted again (a damaged probe.pkl)."""

from __future__ import annotations

import logging
import pickle

import pytest

from support import REPO, compose, holdout_env, make_build, one_error_line, run_script
from automon.config.common import ConfigError
from automon.errors import UserError
from automon.outdir import OutDirError
from automon.probes.fit import PROBE_FILE, check_probe_cache, load_probe

PROBE = REPO / "train" / "probe.py"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=1, train_per_subset=4)


def _train_probe(build, cache, *extra: str):
    from hydra import compose as hcompose
    from hydra import initialize_config_dir

    from automon.config.probe import register
    from automon.training.probe import run

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = hcompose(config_name="probe", overrides=["features=lexical", "train_subset=sg_code", "model=tiny",
                                                       f"data.dir={build}", f"cache_dir={cache}", *extra])
    return run(cfg)


def test_a_negative_seed_is_refused_at_config_time():
    """seed=-1 was a traceback inside scikit-learn once the features were computed."""
    with pytest.raises(ConfigError, match=r"backend\.seed=-1 is out of range"):
        compose(["backend=probe", "model=tiny", "backend.seed=-1"])
    r = run_script(PROBE, "features=lexical", "seed=-1", env=holdout_env(), timeout=120)
    one_error_line(r, "seed=-1 is out of range (seed); use a value >= 0")


def test_a_layer_the_model_does_not_have_is_refused_before_it_loads(tiny_model_path):
    """layer=99 of a 2-layer model was an IndexError after the model had loaded (probes and OOD alike)."""
    from automon.probes.features import check_layer

    model = compose(["backend=probe", "model=tiny"]).model
    with pytest.raises(UserError, match=r"backend\.layer=99 is out of range: model=tiny has 2 layers.*from -3 to 2"):
        check_layer(model, 99, "backend.layer")
    for ok in (-3, -1, 0, 2):
        check_layer(model, ok, "backend.layer")


def test_a_damaged_probe_is_fitted_again(build, tmp_path, caplog):
    """probe.pkl cut in half, or holding another object, was a traceback in every later evaluation."""
    d = _train_probe(build, tmp_path)
    good = (d / PROBE_FILE).read_bytes()
    for damaged in (good[:len(good) // 2], pickle.dumps({"not": "a probe"})):
        (d / PROBE_FILE).write_bytes(damaged)
        with caplog.at_level(logging.WARNING):
            assert load_probe(d, "lexical", None) is None
        assert "the probe is fitted again" in caplog.text
        caplog.clear()
        assert _train_probe(build, tmp_path) == d and load_probe(d, "lexical", None) is not None


def test_a_probe_cache_that_cannot_be_written_is_refused_before_the_fit(build, tmp_path, monkeypatch):
    """cache_dir= a file, AUTOMON_CACHE a file, or a HOME that cannot be written (AUTOMON_CACHE unset):
    a NotADirectoryError or PermissionError when the fitted probe was saved."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(OutDirError, match=r"cannot write in cache_dir=.*afile/probes"):
        _train_probe(build, afile)
    monkeypatch.setenv("AUTOMON_CACHE", str(afile))
    with pytest.raises(OutDirError, match=r"cannot write in AUTOMON_CACHE=.*set AUTOMON_CACHE= to a directory"):
        check_probe_cache(tmp_path / "nowhere", None, "backend.cache_dir")
    monkeypatch.delenv("AUTOMON_CACHE")
    monkeypatch.setenv("HOME", str(afile))  # what a read-only HOME does to ~/.cache/automon
    with pytest.raises(OutDirError, match="AUTOMON_CACHE"):
        check_probe_cache(tmp_path / "nowhere", None, "backend.cache_dir")
    env = {**holdout_env(), "HOME": str(afile)}
    env.pop("AUTOMON_CACHE", None)
    r = run_script(REPO / "eval" / "holdout.py", "model=tiny", "backend=probe", f"data.dir={build}",
                   "backend.train_subsets=[sg_code]", f"output_dir={tmp_path / 'o'}", env=env, timeout=240)
    one_error_line(r, "cannot write in AUTOMON_CACHE=")
    assert not (tmp_path / "o").exists()


def test_the_tiny_model_cache_that_cannot_be_written_is_one_error_line(tmp_path, monkeypatch):
    """model=tiny is built on first use into $AUTOMON_CACHE/models: training with a read-only HOME was a
    NotADirectoryError / PermissionError traceback."""
    from automon.models.tiny import tiny_qwen3_path

    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("AUTOMON_CACHE", str(afile))
    with pytest.raises(OutDirError, match=r"cannot write in AUTOMON_CACHE=.*models"):
        tiny_qwen3_path()
