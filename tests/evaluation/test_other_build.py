"""The evaluation's other-build check (automon.evaluation.monitors.training_build_notes): it compares
the data hash an adapter records with the evaluated build's, and when it refuses, it names the
manifest fields in which the build the adapter was trained on differs (found through its run.json)."""

from __future__ import annotations

import json
import shutil

import pytest

from support import make_build, rewrite_split
from automon.adapter_meta import AdapterMeta
from automon.data.io import load_build
from automon.evaluation.errors import EvalError
from automon.evaluation.monitors import training_build_notes
from automon.monitors import JudgeMonitor


@pytest.fixture(scope="module")
def trained_on(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "trained_on", pairs_per_subset=1, train_per_subset=2)


def _adapter(run_dir, build, run_json: bool = True) -> JudgeMonitor:
    """An adapter's monitor as train/sft.py leaves it: <run>/adapter, <run>/run.json naming the build."""
    run_dir.mkdir(parents=True)
    if run_json:
        (run_dir / "run.json").write_text(json.dumps({"status": "complete", "data_build": str(build)}))
    meta = AdapterMeta(base_model="tiny", pretrained="tiny", prompt="direct_v1", enable_thinking=False,
                       subset="all", data_manifest_hash=load_build(build).manifest_hash, lora_rank=8,
                       automon_version="test", extra={"run_dir": str(run_dir)})
    return JudgeMonitor(name=run_dir.name, row="all", artifact_dir=run_dir / "adapter", meta=meta)


def _check(monitor, build, allow=False):
    return training_build_notes([monitor], load_build(build).manifest_hash, build, allow)


def test_the_same_data_hash_passes_whatever_the_machine_wrote_beside_it(tmp_path, trained_on):
    same = shutil.copytree(trained_on, tmp_path / "elsewhere")
    (same / "build_log.json").write_text(json.dumps({"build": {"sandbox_isolation": {"sg_code": "unshare"}}}))
    assert _check(_adapter(tmp_path / "run", trained_on), same) == []


def test_a_refusal_names_the_fields_that_differ(tmp_path, trained_on):
    other = shutil.copytree(trained_on, tmp_path / "other")
    rewrite_split(other, "test", lambda rows: rows[0].update(response=rows[0]["response"] + " (edited)"))
    m = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**m, "seed": 7}))
    monitor = _adapter(tmp_path / "run", trained_on)
    with pytest.raises(EvalError) as e:
        _check(monitor, other)
    msg = str(e.value)
    assert "the data hash (automon_adapter.json's data_manifest_hash" in msg and "allow_other_build=true" in msg
    fields = msg.split(f"manifest fields that differ from {trained_on}: ")[1]
    # what the samples are first: the sample file, then the rest of the manifest
    assert fields.startswith("files.test.jsonl: ") and "; seed: 0 -> 7" in fields, msg
    assert "files.train.jsonl" not in fields
    (note,) = _check(monitor, other, allow=True)
    assert note.startswith("CONTAMINATED (other build): adapter run was trained on")


def test_without_its_training_build_the_refusal_says_so(tmp_path, trained_on):
    other = shutil.copytree(trained_on, tmp_path / "other")
    m = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**m, "seed": 7}))
    for name, run_json in (("no_run_json", False), ("build_gone", True)):
        build = shutil.copytree(trained_on, tmp_path / f"for_{name}")
        monitor = _adapter(tmp_path / name, build, run_json=run_json)
        if run_json:  # it names the build, which is no longer there
            shutil.rmtree(build)
        with pytest.raises(EvalError, match=r"the build it was trained on is not at hand \(its run.json's "
                                            r"data_build\) to name the manifest fields that differ"):
            _check(monitor, other)
