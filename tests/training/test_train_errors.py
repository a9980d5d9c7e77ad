"""train/sft.py on bad inputs (docs/errors.md): one line `error: ...`, exit status 2, no
traceback (AUTOMON_DEBUG=1 shows it), before any work (stderr holds nothing else), nothing left behind."""

from __future__ import annotations

import json
import shutil

import pytest

from support import make_build, run_sft, tiny_overrides
from automon.data.io import BuildChanged, load_build, sha256_file


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=1, train_per_subset=2)


def _one_line_error(r, *needles: str, first: bool = True) -> str:
    """The error is stderr's one `error:` line, its last; with `first`, its only line (nothing ran)."""
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr and [ln for ln in lines if ln.startswith("error")] == lines[-1:]
    assert not first or len(lines) == 1, r.stderr[-3000:]
    assert lines[-1].startswith("error: ")
    for n in needles:
        assert n in lines[-1], lines[-1]
    return lines[-1]


def _copy(build, dst):
    shutil.copytree(build, dst)
    return dst


def test_max_steps_zero_is_refused_at_config_time(tmp_path, build):
    r = run_sft(*tiny_overrides(build, tmp_path / "run", "train.max_steps=0"))
    _one_line_error(r, "train.max_steps=0", ">= 1", "-1")  # stderr's only line: nothing ran
    assert not (tmp_path / "run").exists()


def test_train_jsonl_edited_after_the_build_is_refused(tmp_path, build):
    b = _copy(build, tmp_path / "b")
    rows = (b / "train.jsonl").read_text().splitlines()
    row = json.loads(rows[0])
    row["label"] = 1 - row["label"]  # a flipped label: the file still parses, only its hash tells
    rows[0] = json.dumps(row)
    (b / "train.jsonl").write_text("\n".join(rows) + "\n")
    r = run_sft(*tiny_overrides(b, tmp_path / "run", "train.max_steps=1"))
    _one_line_error(r, "train.jsonl was changed after the build", str(b / "train.jsonl"), "rebuild")
    assert not (tmp_path / "run").exists()  # refused before the run dir or the model


def test_truncated_line_is_refused_by_its_hash_and_else_names_file_and_line(tmp_path, build):
    b = _copy(build, tmp_path / "b")
    rows = (b / "train.jsonl").read_text().splitlines()
    rows[2] = rows[2][: len(rows[2]) // 2]
    (b / "train.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(BuildChanged, match="changed after the build"):
        load_build(b, verify=("train",))
    # The same line in a build whose manifest agrees (a faulty writer): the reader names file and line.
    mf = json.loads((b / "manifest.json").read_text())
    mf["files"]["train.jsonl"] = sha256_file(b / "train.jsonl")
    (b / "manifest.json").write_text(json.dumps(mf))
    r = run_sft(*tiny_overrides(b, tmp_path / "run", "train.max_steps=1"), env={"AUTOMON_DEBUG": None})
    _one_line_error(r, "not a valid sample", f"{b / 'train.jsonl'}:3", "rebuild it", first=False)


def test_unwritable_output_dir_fails_before_the_model_loads(tmp_path, build):
    (tmp_path / "afile").write_text("x")
    r = run_sft(*tiny_overrides(build, tmp_path / "afile" / "run", "train.max_steps=1"))
    _one_line_error(r, "cannot write in output_dir=", "Not a directory")  # stderr's only line: nothing ran
    r = run_sft(*tiny_overrides(build, tmp_path / "new" / "deeper" / "run", "train.max_steps=0"))
    assert r.returncode == 2 and not (tmp_path / "new").exists()  # the write check leaves no dirs behind


def test_automon_debug_shows_the_traceback(tmp_path, build):
    r = run_sft(*tiny_overrides(build, tmp_path / "run", "train.max_steps=0"), env={"AUTOMON_DEBUG": "1"})
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("error: train.max_steps=0")


def test_build_files_are_hashed_once_per_process_while_unchanged(tmp_path, build, monkeypatch):
    import automon.data.io as io

    b = _copy(build, tmp_path / "b")
    calls = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda p, *a: calls.append(str(p)) or real(p, *a))
    load_build(b, verify=("train",)).samples("train")
    n = sum(c.endswith("train.jsonl") for c in calls)
    assert n == 1  # verified once though load_build and samples() both check it
    with open(b / "train.jsonl", "a") as f:
        f.write("\n")  # a change after the first check is seen (size and mtime differ)
    with pytest.raises(BuildChanged):
        load_build(b).samples("train")
