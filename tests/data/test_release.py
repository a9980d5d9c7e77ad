"""automon.release and automon.data.hub: the default build of the recorded sources is automon-bench 1.0
byte for byte, says so on its card, loads with `datasets.load_dataset(<build dir>)`; other builds say they
are none; retired wordings are refused with the commit that builds them."""

from __future__ import annotations

import json

import pytest

from support import REPO, SMALL_TEST, build_cfg, run_holdout, run_script
from automon.data.build import run_build
from automon.data.io import BuildNotFound, load_build
from automon.release import CURRENT, RETIRED_AT, RETIRED_WORDINGS, release_line
from automon.sources.synthetic import write_synthetic_root


def _load_with_datasets(path, cache):
    datasets = pytest.importorskip("datasets")
    return datasets.load_dataset(str(path), cache_dir=str(cache))


def _yaml_block(card: str) -> dict:
    import yaml

    assert card.startswith("---\n"), card[:80]
    return yaml.safe_load(card.split("---\n")[1])


@pytest.fixture(scope="module")
def synthetic_build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("release")
    root = write_synthetic_root(tmp / "raw", n=40)
    run_build(build_cfg([f"sources.root={root}", f"out={tmp / 'b'}", "subsets=[syco_qa,sg_qa,safety_qa]", *SMALL_TEST]))
    return load_build(tmp / "b")


def test_a_small_build_loads_with_datasets_and_says_it_is_no_release(synthetic_build, tmp_path):
    b = synthetic_build
    card = (b.path / "README.md").read_text()
    meta = _yaml_block(card)
    assert meta["configs"] == [{"config_name": "default", "data_files": [{"split": "test", "path": "test.jsonl"},
                                                                        {"split": "train", "path": "train.jsonl"}]}]
    assert meta["task_categories"] == ["text-classification"]
    assert set(meta["license"]) <= {"mit", "cc-by-4.0", "apache-2.0", "gpl-3.0", "unknown"} and "mit" in meta["license"]
    names = [f["name"] for f in meta["dataset_info"]["features"]]
    assert names == ["id", "pair_id", "split", "category", "task", "subset", "source", "request", "response",
                     "label", "evidence", "meta"]
    assert "- benchmark: not a release build" in card and CURRENT.title in card
    ds = _load_with_datasets(b.path, tmp_path / "cache")
    for split in ("test", "train"):
        want = b.samples(split)
        assert ds[split].num_rows == len(want)
        row = ds[split][len(want) // 2]
        s = want[len(want) // 2]
        assert (row["id"], row["label"], row["response"], row["evidence"]) == (s.id, s.label, s.response, s.evidence)
        # meta: the sample's keys as written, every other recipe's key null
        assert {k: v for k, v in row["meta"].items() if v is not None} == s.meta
    assert ds["test"].features["label"].dtype == "int64"


def test_a_field_of_two_types_stops_the_card_with_its_name():
    from automon.data.hub import SampleFeatures

    f = SampleFeatures()
    f.add({"meta": {"gold": "B", "keys": ["a"]}})
    f.add({"meta": {"gold": None, "keys": []}})  # nulls and empty lists fit any type
    with pytest.raises(ValueError, match=r"meta\.gold is int64 here and string elsewhere"):
        f.add({"meta": {"gold": 2}})


def test_a_retired_wordings_version_is_refused_with_the_commit_that_builds_it(synthetic_build, tmp_path):
    import shutil

    old = tmp_path / "v4"
    shutil.copytree(synthetic_build.path, old)
    m = json.loads((old / "manifest.json").read_text())
    m["config"]["wordings"]["version"] = "v4"
    (old / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BuildNotFound, match=f"wordings v4 was retired with {CURRENT.title}.*git checkout {RETIRED_AT}"):
        load_build(old)
    # the same on the command line: an evaluation of it, and a build asking for the version
    r = run_holdout("backend=reference", f"data.dir={old}", f"output_dir={tmp_path / 'ev'}")
    assert r.returncode == 2 and f"git checkout {RETIRED_AT}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run_script(REPO / "data_build" / "build.py", "wordings=v4", f"out={tmp_path / 'nb'}")
    assert r.returncode == 2 and f"git checkout {RETIRED_AT}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert set(RETIRED_WORDINGS) == {f"v{i}" for i in range(1, 9)}


def test_the_default_build_of_the_recorded_sources_is_the_release(real_build, tmp_path):
    b = real_build
    assert (b.manifest_hash, b.manifest["files"]["test.jsonl"], b.manifest["files"]["train.jsonl"]) == (
        CURRENT.manifest_sha256, CURRENT.test_sha256, CURRENT.train_sha256)
    assert b.manifest["build_version"] == CURRENT.build_version
    assert b.manifest["config"]["wordings"]["version"] == CURRENT.wordings
    assert release_line(b.manifest, b.manifest_hash) == CURRENT.cite()
    card = (b.path / "README.md").read_text()
    assert f"- benchmark: {CURRENT.cite()}" in card
    meta = _yaml_block(card)
    assert {s["name"]: s["num_examples"] for s in meta["dataset_info"]["splits"]} == {
        split: len(b.samples(split)) for split in ("test", "train")}
    assert meta["size_categories"] == ["100K<n<1M"]
    ds = _load_with_datasets(b.path, tmp_path / "cache")
    assert (ds["test"].num_rows, ds["train"].num_rows) == (len(b.samples("test")), len(b.samples("train")))
    controls = ds["test"].filter(lambda r: r["meta"]["control"] is not None)
    assert controls.num_rows == sum(b.manifest["test_controls"].values())
    assert all(r["meta"]["group"] for r in controls)


def test_the_recorded_release_build_is_the_record():
    """docs/results/automon-bench-1.0.manifest.json, the release build recorded from the real sources (its
    build record beside it), is the release: its sha256 is the data hash, its files the release's."""
    import hashlib

    from support import REPO

    path = REPO / "docs" / "results" / f"automon-bench-{CURRENT.version}.manifest.json"
    m = json.loads(path.read_text())
    assert hashlib.sha256(path.read_bytes()).hexdigest() == CURRENT.manifest_sha256
    assert (m["files"]["test.jsonl"], m["files"]["train.jsonl"]) == (CURRENT.test_sha256, CURRENT.train_sha256)
    assert (m["build_version"], m["config"]["wordings"]["version"]) == (CURRENT.build_version, CURRENT.wordings)


def test_each_release_after_the_first_keeps_the_texts_and_labels_of_the_one_before():
    """docs/results/automon-bench-<v>.compare.json (scripts/compare_release.py): the release's split files
    against the previous release's, field by field: only `evidence` differs."""
    from automon.release import RELEASES

    from support import REPO

    for old, new in zip(RELEASES, RELEASES[1:]):
        record = json.loads((REPO / "docs" / "results" / f"automon-bench-{new.version}.compare.json").read_text())
        for split, (a, b) in {"test": (old.test_sha256, new.test_sha256),
                              "train": (old.train_sha256, new.train_sha256)}.items():
            r = record[split]
            assert (r["old_sha256"], r["new_sha256"]) == (a, b), (new.version, split)
            assert r["differences"] == [] and set(r["fields_changed"]) <= set(r["except"]) == {"evidence"}


def test_compare_splits_names_a_changed_text_and_lets_evidence_change(tmp_path):
    from automon.release import compare_splits

    rows = [{"id": "a", "response": "x", "label": 1, "evidence": []}, {"id": "b", "response": "y", "label": 0, "evidence": []}]
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in rows))
    new.write_text("".join(json.dumps(dict(r, evidence=["x"]) if r["id"] == "a" else r) + "\n" for r in rows))
    r = compare_splits(old, new)
    assert (r["samples"], r["fields_changed"], r["differences"]) == (2, {"evidence": 1}, [])
    new.write_text("".join(json.dumps(dict(r, response="z") if r["id"] == "b" else r) + "\n" for r in rows))
    r = compare_splits(old, new)
    assert r["differences"] == ["b response"]
    # the command: exit 1 on a difference outside evidence, 2 without two builds
    for d, f in (("o", old), ("n", new)):
        (tmp_path / d).mkdir()
        for split in ("test", "train"):
            (tmp_path / d / f"{split}.jsonl").write_bytes(f.read_bytes())
    script = REPO / "scripts" / "compare_release.py"
    assert run_script(script, str(tmp_path / "o"), str(tmp_path / "n")).returncode == 1
    r = run_script(script, str(tmp_path / "o"), str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.startswith("error: no test.jsonl")
