"""Settings an evaluation could check at start-up but found out only after a model had loaded (or never):
OOD's layer and feature cache, the paraphrase stress's backend, device and cache; and the converse, a
read-only prediction cache that holds every prediction is read, not refused."""

from __future__ import annotations

import pytest

from support import compose, make_build
from automon.backends import cache as cache_mod
from automon.backends.cache import PredictionCache
from automon.config.common import ConfigError
from automon.errors import UserError
from automon.evaluation import evaluate
from automon.evaluation.identity import as_config
from automon.outdir import OutDirError


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=1, train_per_subset=4)


def _probe(build, out, *extra: str) -> list[str]:
    return ["model=tiny", "backend=probe", f"data.dir={build}", "backend.train_subsets=[sg_code]",
            f"backend.cache_dir={out.parent / 'probes'}", f"output_dir={out}", "bootstrap.n=20",
            "wandb.mode=disabled", "progress=false", *extra]


@pytest.mark.parametrize("setting, error, message", [
    ("ood.layer=99", UserError, r"ood\.layer=99 is out of range: model=tiny has 2 layers"),
    ("ood.cache_dir={afile}", OutDirError, r"cannot write in ood\.cache_dir="),
])
def test_ood_settings_are_checked_before_any_model_loads(build, tmp_path, monkeypatch, setting, error, message):
    """ood.layer=99 was an IndexError, ood.cache_dir=<a file> a NotADirectoryError, after scoring."""
    from automon.evaluation import scoring

    def no_scoring(*a, **k):
        raise AssertionError("scored before the settings were checked")

    monkeypatch.setattr(scoring, "_score_missing", no_scoring)
    afile = tmp_path / "afile"
    afile.write_text("x")
    ov = _probe(build, tmp_path / "o", "detectors=[mahalanobis]", "fusion=lambda", "ood.cap=4",
                setting.format(afile=afile))
    with pytest.raises(error, match=message):
        evaluate(compose(ov))


def _paraphrase(*extra: str):
    return as_config(compose(["backend=hf", "model=tiny", "stress=[paraphrase]", "data.dir=unused",
                              "paraphrase.model=tiny", *extra]))


def test_the_paraphrase_model_settings_are_checked_at_start_up(tmp_path):
    """paraphrase.backend=probe was a NotImplementedError, a cache that is a file a NotADirectoryError
    naming cache_dir=, both once the policy model had loaded."""
    with pytest.raises(ConfigError, match=r"paraphrase\.backend=probe cannot write answers.*use paraphrase\.backend="):
        _paraphrase("paraphrase.backend=probe")
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ConfigError, match=r"cannot write in paraphrase\.cache="):
        _paraphrase(f"paraphrase.cache={afile}")


def test_a_cuda_device_without_a_gpu_is_refused_before_the_weights_load(tiny_model_path):
    """+paraphrase.backend_args.device=cuda (or backend.device=cuda) on a CPU machine was an AssertionError
    inside torch once the weights had loaded. Refused when the judge is made, before they load; the config
    itself stays composable (a GPU run's status is checked on any machine)."""
    import torch

    from automon.backends.base import JudgeError
    from automon.backends.hf import check_device
    from automon.evaluation.stresses.paraphrase import paraphrase_policy
    from automon.policy.run import PolicyError

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(JudgeError, match=r"backend\.device=cuda:1 needs CUDA GPU 1, and this machine has 0"):
        check_device("cuda:1")
    c = _paraphrase("+paraphrase.backend_args.device=cuda")  # composes
    with pytest.raises(PolicyError, match=r"paraphrase\.backend_args\.device=cuda needs CUDA GPU 0"):
        paraphrase_policy(c)._open()


def test_a_read_only_cache_that_holds_every_prediction_is_read(tmp_path, monkeypatch):
    """A cache_dir that cannot be written was refused when the cache opened, even when nothing was missing
    from it: it is checked only before predictions it lacks are computed."""
    key = {"k": 1}
    (tmp_path / "c").mkdir()
    PredictionCache(tmp_path / "c", key).path.write_text("")  # the cache file, there already

    def read_only(path, key):
        raise OutDirError(f"cannot write in {key}={path}: Read-only file system")

    monkeypatch.setattr(cache_mod, "ensure_writable_dir", read_only)
    cache = PredictionCache(tmp_path / "c", key)  # opens: nothing would be written
    with pytest.raises(OutDirError, match="Read-only file system"):
        cache.require_writable()  # what scoring calls before computing a missing prediction
