"""Robustness (stress=): the stressed sets are scored beside the clean test set by every monitor,
never confused with it (ids, cache entries, prompt hashes), leave the clean results as they were, and
are compared with the clean pairs they come from by a paired pair bootstrap."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from support import compose, cpu_overrides, make_build
from automon import metrics as M
from automon.config.eval import ConfigError
from automon.evaluation import evaluate
from automon.evaluation.identity import as_config
from automon.evaluation.stresses import STRESSES, Stress
from automon.schema import SUBSETS


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=2, train_per_subset=8)


@pytest.fixture()
def toy_stresses(monkeypatch):
    """Two stresses the package does not ship: one rewrites every response, one changes nothing."""
    monkeypatch.setitem(STRESSES, "shout", Stress("shout", 1, "the response in capitals", frozenset(SUBSETS),
                                                  lambda s, rng: replace(s, response=s.response.upper(),
                                                                         evidence=[e.upper() for e in s.evidence])))
    monkeypatch.setitem(STRESSES, "noop", Stress("noop", 1, "nothing", frozenset(SUBSETS), lambda s, rng: s))


def probe(build: Path, out: Path, *extra: str) -> list[str]:
    """The lexical probe (TF-IDF + logistic regression) on the sg_code and all training splits."""
    return ["model=tiny", "backend=probe", f"data.dir={build}", "backend.train_subsets=[sg_code,all]",
            f"backend.cache_dir={out.parent / 'probes'}", f"output_dir={out}", "bootstrap.n=200",
            "wandb.mode=disabled", "progress=false", *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def without_robustness(doc: dict) -> dict:
    doc = {k: v for k, v in doc.items() if k not in ("robustness", "cache")}
    if "monitors" in doc:
        doc["monitors"] = {n: {k: v for k, v in m.items() if k != "robustness"} for n, m in doc["monitors"].items()}
    return doc


# ---------------------------------------------------------------- configuration

def test_stress_names_are_checked_against_the_registry_at_start_up(toy_stresses):
    def check(*ov):
        return as_config(compose(["backend=hf", "model=tiny", *ov]))

    with pytest.raises(ConfigError, match=r"unknown nope.*registered stresses: .*noop, .*shout"):
        check("stress=[nope]")
    with pytest.raises(ConfigError, match="twice"):
        check("stress=[shout,shout]")
    with pytest.raises(ConfigError, match="stress_seed"):
        check("stress=[shout]", "stress_seed=-1")
    assert check("stress=[shout,noop]", "stress_seed=3").stress == ["shout", "noop"]


def test_a_stress_that_covers_none_of_the_subsets_scored_is_refused(monkeypatch, tmp_path):
    monkeypatch.setitem(STRESSES, "codeonly", Stress("codeonly", 1, "t", frozenset({"sg_code"}), lambda s, rng: s))
    with pytest.raises(ConfigError, match="covers sg_code, none of"):
        as_config(compose(["backend=hf", "model=tiny", "stress=[codeonly]", "data.subsets=[safety_qa]"]))


def test_a_stress_prepares_once_for_the_build_and_obfuscate_finds_the_builds_sources(monkeypatch, tmp_path):
    """Stress.prepare gets the evaluated build's directory before any sample is stressed; the build's
    sources root (manifest config, or the build record since build-v2) is found where it still is."""
    import automon.evaluation.stresses.obfuscate as obf
    from automon.data.io import sources_root
    from automon.evaluation.robustness import stressed_sets

    build = make_build(tmp_path / "b", pairs_per_subset=1)
    seen = []
    monkeypatch.setitem(STRESSES, "noted", Stress("noted", 1, "t", frozenset(SUBSETS), lambda s, rng: s,
                                                  prepare=seen.append))
    c = as_config(compose(["backend=hf", "model=tiny", f"data.dir={build}", "stress=[noted]"]))
    out = stressed_sets(c, [])
    assert seen == [Path(str(build))] and out == {"noted": []}
    # where the sources were: a directory that still exists, from the manifest or the build record
    assert sources_root(build) is None  # tests/support's builds have no sources.root
    raw = tmp_path / "raw"
    raw.mkdir()
    (build / "build_log.json").write_text(json.dumps({"build": {"config": {"sources": {"root": str(raw)}}}}))
    assert sources_root(build) == raw
    (build / "build_log.json").write_text(json.dumps({"build": {"config": {"sources": {"root": str(tmp_path / "gone")}}}}))
    assert sources_root(build) is None
    monkeypatch.setattr(obf, "_SOURCES_ROOT", None)
    (build / "build_log.json").write_text(json.dumps({"build": {"config": {"sources": {"root": str(raw)}}}}))
    obf.prepare(build)
    assert obf._root() == raw


def test_the_command_line_and_the_pipeline_refuse_an_unknown_stress_before_anything_runs(tmp_path, build):
    from support import run_holdout

    r = run_holdout(*cpu_overrides(build, tmp_path / "o", "stress=[inject,nope]"))
    assert r.returncode == 2 and "registered stresses: claim, inject" in r.stderr
    assert not (tmp_path / "o").exists()
    from support import REPO
    from automon.pipeline.compose import hydra_for
    from automon.pipeline.stages import PipelineError, compose_stage

    with hydra_for(REPO / "conf"), pytest.raises(PipelineError, match="unknown nope"):
        compose_stage("eval", "eval", cpu_overrides(build, tmp_path / "o", "stress=[nope]"), "python", REPO)


# ---------------------------------------------------------------- identity and the clean results

def test_a_stressed_sample_has_its_own_id_cache_entry_and_prompt_hash(tmp_path, build, toy_stresses):
    c = compose(cpu_overrides(build, tmp_path / "o", "stress=[shout]", "data.max_pairs_per_subset=1"))
    res = evaluate(c)
    clean = [r for r in res.predictions["base"] if "stress" not in r]
    loud = [r for r in res.predictions["base"] if r.get("stress") == "shout"]
    assert [r["id"] + "~shout" for r in clean] == [r["id"] for r in loud]
    assert [r["pair_id"] + "~shout" for r in clean] == [r["pair_id"] for r in loud]
    cached = {}
    for f in (tmp_path / "o" / "cache").rglob("*.jsonl"):
        cached.update({r["id"]: r for r in lines(f) if "id" in r})
    for r in clean:
        assert cached[r["id"]]["prompt_sha"] != cached[r["id"] + "~shout"]["prompt_sha"]
    assert evaluate(c).n_computed == 0  # both sets come from the cache the second time


def test_the_clean_results_do_not_change_when_stress_is_added(tmp_path, build, toy_stresses):
    """From scratch, each in its own output and cache: the tiny model (hf backend) and the lexical probes."""
    for name, overrides in (("tiny", lambda out, *x: cpu_overrides(build, out, *x)),
                            ("probe", lambda out, *x: probe(build, out, *x))):
        plain, stressed = tmp_path / name / "plain", tmp_path / name / "stressed"
        evaluate(compose(overrides(plain)))
        evaluate(compose(overrides(stressed, "stress=[shout,noop]")))
        for a in sorted(plain.rglob("metrics.json")):
            b = stressed / a.relative_to(plain)
            doc = json.loads(b.read_text())
            assert "robustness" in doc or "robustness" in next(iter(doc["monitors"].values()))
            assert without_robustness(json.loads(a.read_text())) == without_robustness(doc), a
        for a in sorted(plain.rglob("predictions.jsonl")):
            b = lines(stressed / a.relative_to(plain))
            assert lines(a) == [r for r in b if "stress" not in r]
            assert {r["stress"] for r in b if "stress" in r} == {"shout", "noop"}
        if name == "probe":
            assert (plain / "matrix.csv").read_bytes() == (stressed / "matrix.csv").read_bytes()


# ---------------------------------------------------------------- every registered stress, on CPU

@pytest.mark.parametrize("monitor", ["lexical probe", "tiny model"])
def test_every_registered_stress_runs_through_the_monitors_and_is_reported(tmp_path, build, monitor):
    names = sorted(STRESSES)
    assert {"inject", "claim"} <= set(names)
    out = tmp_path / "o"
    ov = (probe(build, out, f"stress=[{','.join(names)}]") if monitor == "lexical probe"
          else cpu_overrides(build, out, f"stress=[{','.join(names)}]"))
    res = evaluate(compose(ov))
    samples = lines(out / "stressed_samples.jsonl")
    assert {s["meta"]["stress"]["name"] for s in samples} == set(names)
    assert all(s["id"] == f"{s['meta']['stress']['of']}~{s['meta']['stress']['name']}" for s in samples)
    rows = list(csv.DictReader(open(out / "robustness.csv")))
    assert {(r["monitor"], r["stress"]) for r in rows if r["test"] == "overall"} == {
        (m.name, s) for m in res.monitors for s in names}
    for m in res.monitors:
        stressed = [r for r in res.predictions[m.name] if "stress" in r]
        assert len(stressed) == len(samples)
        rob = res.metrics[m.name]["robustness"]
        for s in names:
            cell = rob["by_stress"][s]["overall"]
            assert cell["n"] == rob["stresses"][s]["n_samples"] == cell["stressed"]["n"] == cell["clean"]["n"]
            ch = cell["change"]
            for key in ("mr", "far"):  # the change is stressed - clean, and its CI holds it
                assert ch[key]["change"] == pytest.approx(cell["stressed"][key] - cell["clean"][key])
                lo, hi = ch[key]["change_ci"]
                assert lo - 1e-9 <= ch[key]["change"] <= hi + 1e-9
    report = (out / "report.md").read_text()
    assert "## Robustness" in report and "![clean vs stressed](robustness.png)" in report
    assert all(f"| {s} | overall |" in report for s in names)
    from matplotlib.image import imread

    assert imread(out / "robustness.png").shape[0] > 100


def test_the_same_seed_gives_the_same_stressed_samples_byte_for_byte(tmp_path, build):
    got = {}
    for run, seed in (("a", 0), ("b", 0), ("c", 1)):
        evaluate(compose(probe(build, tmp_path / run, "stress=[inject,claim]", f"stress_seed={seed}")))
        got[run] = (tmp_path / run / "stressed_samples.jsonl").read_bytes()
    assert got["a"] == got["b"]
    assert got["a"] != got["c"]  # the seed chooses the wordings and places


# ---------------------------------------------------------------- the paired change

def test_a_stress_that_changes_nothing_changes_no_metric_and_its_ci_has_width_zero(tmp_path, build, toy_stresses):
    res = evaluate(compose(probe(build, tmp_path / "o", "stress=[noop]")))
    for m in res.monitors:
        per = res.metrics[m.name]["robustness"]["by_stress"]["noop"]
        for cell in [per["overall"], *per["by_subset"].values()]:
            for key, ch in cell["change"].items():
                if ch["clean"] == ch["clean"]:  # defined (AUROC needs both classes)
                    assert ch["change"] == 0.0 and ch["change_ci"] == [0.0, 0.0], (m.name, key)
    from automon.report.wandb_log import eval_tables  # wandb mirrors robustness.csv's rows

    cols, rows = eval_tables([m.describe() for m in res.monitors], res.metrics)["robustness"]
    assert len(rows) == len(list(csv.DictReader(open(tmp_path / "o" / "robustness.csv")))) == 2 * (len(SUBSETS) + 1)
    assert cols[:4] == ["row", "monitor", "stress", "test"]


def test_the_change_ci_resamples_pairs_once_for_both_sets():
    """Stressed = clean with two of ten misbehavior twins now missed: MR rises by 0.2, FAR stays; the CI
    of the change is that of the paired difference (never below 0 here: no pair gets better)."""
    from types import SimpleNamespace

    from automon.evaluation.robustness import compare

    clean, stressed = [], []
    for i in range(10):
        for label in (1, 0):
            r = {"id": f"p{i}-{label}", "pair_id": f"p{i}", "subset": "sg_code", "label": label, "error": None,
                 "pred": label, "p_yes": 0.9 if label else 0.1}
            clean.append(r)
            missed = label == 1 and i < 2
            stressed.append({**r, "id": r["id"] + "~x", "pair_id": "p%d~x" % i, "pred": 0 if missed else r["pred"],
                             "p_yes": 0.05 if missed else r["p_yes"]})
    c = SimpleNamespace(unparseable="wrong", far_targets=[0.05], bootstrap=SimpleNamespace(n=500, seed=0, ci=0.95))
    ch = compare(list(zip(clean, stressed)), c, None)["change"]
    assert ch["mr"]["change"] == pytest.approx(0.2) and ch["far"]["change"] == 0.0
    assert 0.0 <= ch["mr"]["change_ci"][0] < 0.2 < ch["mr"]["change_ci"][1] <= 0.6
    assert ch["far"]["change_ci"] == [0.0, 0.0]
    assert ch["auroc"]["change"] == pytest.approx(-0.2) and ch["auroc"]["change_ci"][1] <= 0.0
    assert ch["det"]["clean"] == 1.0 and ch["det"]["stressed"] == pytest.approx(0.8)


def test_weighted_auroc_is_auroc_with_unit_weights_and_with_repeated_samples():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 40)
    s = rng.integers(0, 6, 40) / 5  # ties
    assert M.weighted_auroc(y, s, np.ones(40))[0] == pytest.approx(M.auroc(y, s))
    w = rng.integers(0, 3, 40)
    rep = np.repeat(np.arange(40), w)
    assert M.weighted_auroc(y, s, w[None, :])[0] == pytest.approx(M.auroc(y[rep], s[rep]))


# ---------------------------------------------------------------- pipeline and combined report

def test_the_mini_experiment_passes_its_stresses_to_every_evaluation():
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from support import REPO
    from automon.config.pipeline import register
    from automon.pipeline.stages import eval_overrides

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        c = OmegaConf.to_object(hcompose(config_name="pipeline", overrides=["experiment=mini"]))
    for also in (None, *c.eval.also):
        assert "stress=[inject,claim]" in eval_overrides(c, also), also
    ov = [o for o in eval_overrides(c, "probe_lexical") if not o.startswith(("sweep_dir", "data.dir", "output_dir"))]
    assert compose(ov).stress == ["inject", "claim"]


def test_the_combined_report_of_several_evaluations_has_the_robustness_table(tmp_path, build):
    from automon.report.combined import combine, publish

    evaluate(compose(probe(build, tmp_path / "probe", "stress=[inject]")))
    evaluate(compose(cpu_overrides(build, tmp_path / "tiny", "stress=[inject]", "data.max_pairs_per_subset=1")))
    out = combine({"probe": tmp_path / "probe", "tiny": tmp_path / "tiny"}, tmp_path / "combined", "both")
    rows = list(csv.DictReader(open(out / "robustness.csv")))
    assert {(r["monitor"], r["test"]) for r in rows if r["stress"] == "inject"} >= {
        ("probe/lexical-all", "overall"), ("tiny/base", "overall")}
    assert "## Robustness" in (out / "report.md").read_text() and (out / "robustness.png").exists()
    dest = publish({"probe": tmp_path / "probe", "tiny": tmp_path / "tiny"}, out, tmp_path / "pub")
    assert (dest / "tiny" / "stressed_samples.jsonl.gz").exists() and (dest / "robustness.csv").exists()


def test_a_fused_monitor_scores_the_stressed_sets_apart_and_its_clean_results_stay(tmp_path, toy_stresses):
    """fusion= (detectors on the tiny model's hidden states) implies far_reference: Det@1%FAR then flags
    at the monitor's reference threshold, and the fused monitor's clean scores are those without stress."""
    build = make_build(tmp_path / "build", pairs_per_subset=3, train_per_subset=24)
    docs = {}
    for run, extra in (("plain", []), ("stressed", ["stress=[shout]"])):
        ov = ["backend=probe", "model=tiny", "backend.features=lexical", "backend.train_subsets=[safety_code]",
              "detectors=[mahalanobis]", "fusion=lambda", "ood.cap=4", f"data.dir={build}",
              f"output_dir={tmp_path / run}", f"ood.cache_dir={tmp_path / 'features'}", "wandb.mode=disabled",
              "progress=false", "bootstrap.n=20", f"backend.cache_dir={tmp_path / 'probes'}", *extra]
        docs[run] = evaluate(compose(ov)).metrics
    assert set(docs["plain"]) == {"lexical-safety_code", "lexical-safety_code+lambda"}
    for name, doc in docs["stressed"].items():
        assert without_robustness(doc) == without_robustness(docs["plain"][name]), name
        rob = doc["robustness"]
        assert rob["detection_threshold"] == "reference"
        det = rob["by_stress"]["shout"]["overall"]["change"]["det"]
        assert det["threshold"] == doc["far_reference"]["thresholds"]["0.010"]
        cell = rob["by_stress"]["shout"]["overall"]  # each set's own metrics at the reference thresholds too
        assert det["clean"] == cell["clean"]["det_at_far"]["0.010"]
        assert det["stressed"] == cell["stressed"]["det_at_far"]["0.010"]


def test_an_evaluation_with_stress_is_stale_when_a_stress_changes_version(tmp_path, build, toy_stresses, monkeypatch):
    from automon.evaluation.status import status

    ov = probe(build, tmp_path / "o", "stress=[shout]")
    evaluate(compose(ov))
    assert status(compose(ov)).current
    monkeypatch.setitem(STRESSES, "shout", replace(STRESSES["shout"], version=2))
    st = status(compose(ov))
    assert not st.current and "stresses" in st.reason


def _readme_robustness_table(header: str, overall_rows: list[dict]) -> None:
    """The table of docs/results/mini/README.md that starts with `header`: one row per (monitor, stress) of
    `overall_rows` (a robustness.csv's overall rows), each cell as the csv records it."""
    from support import REPO, markdown_table

    table = markdown_table((REPO / "docs/results/mini/README.md").read_text(), header)
    by_key = {(r["monitor"], r["stress"]): r for r in overall_rows}
    assert len(table) == len(by_key) >= 2
    f, d = (lambda v: f"{float(v):.3f}"), (lambda v: f"{float(v):+.3f}")
    for monitor, name, pairs, *cells in table:
        r = by_key[(monitor, name)]
        assert pairs == r["n_pairs"], (monitor, name)
        for i, m in enumerate(("mr", "far", "auroc")):
            assert cells[2 * i] == f"{f(r[m + '_clean'])} -> {f(r[m + '_stressed'])}", (monitor, name, m)
            assert cells[2 * i + 1] == f"{d(r['d_' + m])} [{d(r['d_' + m + '_lo'])}, {d(r['d_' + m + '_hi'])}]", \
                (monitor, name, m)


@pytest.mark.parametrize("evaluation, header", [("probe_lexical", "| probe | stress | pairs |"),
                                                ("direct_v1", "| monitor | stress | pairs |")])
def test_the_mini_study_readme_shows_the_robustness_it_measured(evaluation, header):
    """docs/results/mini/README.md's robustness tables (the lexical probes; the SmolLM2 direct_v1 monitors): each
    cell as that evaluation's committed robustness.csv records it, under the stresses experiment=mini names."""
    import yaml

    from support import REPO

    mini = REPO / "docs/results/mini"
    overall = [r for r in csv.DictReader(open(mini / evaluation / "robustness.csv")) if r["test"] == "overall"]
    _readme_robustness_table(header, overall)
    mini_yaml = yaml.safe_load((REPO / "conf/experiment/mini.yaml").read_text())
    assert "stress=[inject,claim]" in mini_yaml["eval"]["args"]
    config = yaml.safe_load((mini / evaluation / "config.yaml").read_text())
    assert config["stress"] == ["inject", "claim"] == sorted({r["stress"] for r in overall}, reverse=True)


def test_the_worked_example_in_the_docs_quotes_the_mini_study():
    """docs/evaluation.md's example of a threshold shift (the `all` lexical probe under inject) is the committed
    robustness.csv's row."""
    from support import REPO

    row = next(r for r in csv.DictReader(open(REPO / "docs/results/mini/probe_lexical/robustness.csv"))
               if (r["monitor"], r["stress"], r["test"]) == ("lexical-all", "inject", "overall"))
    d = lambda m: f"{float(row['d_' + m]):+.3f} [{float(row['d_' + m + '_lo']):+.3f}, {float(row['d_' + m + '_hi']):+.3f}]"  # noqa: E731
    text = " ".join((REPO / "docs/evaluation.md").read_text().split())
    assert f"ΔMR {d('mr')}, ΔFAR {d('far')}, ΔAUROC {d('auroc')}" in text
