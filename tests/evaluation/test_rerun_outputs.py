"""An evaluation rerun into its own output_dir writes a whole new output set and nothing of the earlier one
stays looking current: a run without stress= after one with it leaves no robustness.csv, robustness.png or
stressed_samples.jsonl, a sweep of fewer runs no monitors/<old>/; eval.publish copies only the current set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import compose, make_build
from automon.evaluation import evaluate
from automon.evaluation.publish import publish as publish_set
from automon.outdir import OUTPUT_SET, output_files

STRESSED = {"robustness.csv", "robustness.png", "stressed_samples.jsonl"}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=2, train_per_subset=8)


def _probe(build: Path, out: Path, *extra: str) -> list[str]:
    return ["model=tiny", "backend=probe", f"data.dir={build}", "backend.train_subsets=[sg_code]",
            f"backend.cache_dir={out.parent / 'probes'}", f"output_dir={out}", "bootstrap.n=50",
            "wandb.mode=disabled", "progress=false", *extra]


def test_a_rerun_without_stress_removes_the_robustness_outputs_and_publish_copies_none(tmp_path, build):
    from automon.report.combined import combine, publish

    out = tmp_path / "ev"
    evaluate(compose(_probe(build, out, "stress=[inject]")))
    assert STRESSED <= {p.name for p in out.iterdir()} and STRESSED <= output_files(out)
    assert (combine({"probe": out}, tmp_path / "combined", "one") / "robustness.csv").exists()
    (out / "notes.txt").write_text("mine")  # beside the set, not of it: never removed
    evaluate(compose(_probe(build, out)))
    names = {p.name for p in out.iterdir()}
    assert not STRESSED & names and "notes.txt" in names and (out / "identity.json").exists()
    assert not STRESSED & output_files(out)
    combined = combine({"probe": out}, tmp_path / "combined", "one")  # the same dir: its robustness files go too
    assert not (combined / "robustness.csv").exists() and not (combined / "robustness.png").exists()
    dest = publish({"probe": out}, combined, tmp_path / "pub")
    assert not (dest / "probe" / "stressed_samples.jsonl.gz").exists() and not (dest / "probe" / "robustness.csv").exists()
    assert (dest / "probe" / "report.md").exists() and not (dest / "probe" / "notes.txt").exists()


def _stage(tmp_path: Path, files: dict[str, str]) -> Path:
    stage = tmp_path / f"stage{len(list(tmp_path.glob('stage*')))}"
    for rel, text in files.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_text(text)
    return stage


def test_a_sweep_of_fewer_runs_leaves_no_monitor_of_the_earlier_one(tmp_path):
    """publish() of a set removes the files of the earlier set it lacks (and their empty directories), and
    nothing else: the cache, a further evaluation of the pipeline in a subdirectory, a user's file."""
    out = tmp_path / "ev"
    first = {"metrics.json": '{"metrics_version": 1}', "identity.json": "{}", "monitors/a/predictions.jsonl": "",
             "monitors/b/predictions.jsonl": "", "monitors/b/report.md": "", "robustness.csv": ""}
    publish_set(_stage(tmp_path, first), out)
    for rel in ("cache/x.jsonl", "lex/metrics.json", "keep.md"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("other")
    second = {"metrics.json": '{"metrics_version": 1}', "identity.json": "{}", "monitors/a/predictions.jsonl": "new"}
    publish_set(_stage(tmp_path, second), out)
    assert not (out / "monitors" / "b").exists() and not (out / "robustness.csv").exists()
    assert (out / "monitors" / "a" / "predictions.jsonl").read_text() == "new"
    assert all((out / rel).read_text() == "other" for rel in ("cache/x.jsonl", "lex/metrics.json", "keep.md"))
    assert json.loads((out / OUTPUT_SET).read_text())["files"] == sorted(second)


def test_a_set_from_before_sets_were_listed_is_replaced_by_its_known_names(tmp_path):
    """Results written before OUTPUT_SET existed: the evaluation's own file names (top level and
    monitors/<name>/) are the earlier set; any other file stays."""
    out = tmp_path / "ev"
    for rel in ("metrics.json", "robustness.png", "stressed_samples.jsonl", "monitors/old/metrics.json", "mine.md"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("{}")
    publish_set(_stage(tmp_path, {"metrics.json": "{}", "identity.json": "{}"}), out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        OUTPUT_SET, "identity.json", "metrics.json", "mine.md"]
