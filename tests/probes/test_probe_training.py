"""train/probe.py: a probe trained by its own entry lands where an evaluation with backend=probe and
the same settings loads it (so the evaluation fits nothing), with its identity and provenance; the
pipeline's probe stage composes it and asks its status."""

from __future__ import annotations

import json
import sys

from support import REPO, compose, holdout_env, make_build, run_script

PROBE = REPO / "train" / "probe.py"


def test_a_probe_trained_by_train_probe_is_the_one_the_evaluation_loads(tmp_path, monkeypatch):
    from automon.evaluation import evaluate
    from automon.monitors import ProbeMonitor

    build = make_build(tmp_path / "build", pairs_per_subset=2, train_per_subset=8)
    cache = tmp_path / "cache"
    r = run_script(PROBE, "features=lexical", "train_subset=sg_code", f"data.dir={build}", f"cache_dir={cache}",
                   "cap=50", "model=tiny", env=holdout_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    trained = sorted((cache / "probes").iterdir())
    assert len(trained) == 1
    meta = json.loads((trained[0] / "probe.json").read_text())
    assert meta["train_subset"] == "sg_code" and meta["probe"] == "lexical" and meta["n_train"] > 0
    assert meta["code_version"] and meta["data_manifest_hash"] and meta["library_versions"]
    # rerunning the same command trains nothing
    r2 = run_script(PROBE, "features=lexical", "train_subset=sg_code", f"data.dir={build}", f"cache_dir={cache}",
                    "cap=50", "model=tiny", env=holdout_env(), timeout=300)
    assert r2.returncode == 0 and "trained already" in r2.stdout

    fitted: list[str] = []
    monkeypatch.setattr(ProbeMonitor, "fit", lambda self, train: fitted.append(self.name))
    c = compose(["model=tiny", "backend=probe", f"data.dir={build}", "backend.train_subsets=[sg_code]",
                 "backend.cap=50", f"backend.cache_dir={cache}", f"output_dir={tmp_path / 'out'}", "bootstrap.n=20",
                 "wandb.mode=disabled", "progress=false"])
    res = evaluate(c)
    assert fitted == [] and res.n_computed > 0  # scored with the trained probe, fitted nothing
    assert res.metrics[res.monitors[0].name]["monitor"]["artifact"] == str(trained[0])


def test_the_probe_stage_composes_and_reports_whether_the_probe_is_trained(tmp_path):
    from automon.pipeline.compose import hydra_for
    from automon.pipeline.stages import compose_stage
    from automon.stage_status import Currency

    build = make_build(tmp_path / "build", pairs_per_subset=1, train_per_subset=4)
    ov = ["features=lexical", "train_subset=all", f"data.dir={build}", f"cache_dir={tmp_path / 'cache'}", "model=tiny"]
    with hydra_for(REPO / "conf"):
        run = compose_stage("probe", "probe lexical all", ov, sys.executable, REPO)
    assert run.status().state is Currency.MISSING
    r = run_script(*run.command(sys.executable, REPO)[1:], env=holdout_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert run.status().state is Currency.CURRENT


def test_a_probe_config_typo_stops_at_start_up(tmp_path):
    r = run_script(PROBE, "features=lexicall", env=holdout_env(), timeout=120)
    assert r.returncode == 2 and "lexicall" in r.stderr
