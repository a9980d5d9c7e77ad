"""scripts/blind_read.py: reading rounds with contrast controls, a round's key never overwritten, and every
bad input one `error:` line with exit 2 (the annotation tooling ships data; it follows the entry points'
convention)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import REPO, synthetic_samples
from automon.data.io import write_build
from automon.schema import Sample

SCRIPT = str(REPO / "scripts" / "blind_read.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    test = list(synthetic_samples("test", 8))
    for s in [s for s in test if s.subset == "syco_qa" and s.label == 0]:
        test.append(Sample(f"{s.id}-ctl", f"{s.pair_id}-ctl", "test", s.category, s.task, s.subset, s.source,
                           s.request, s.response + " (agreeing)", 0, [],
                           {"control": "right_cue_agree", "group": s.pair_id}).validate())
    out = tmp_path_factory.mktemp("b") / "build"
    write_build(out, synthetic_samples("train", 4), test, {"seed": 0, "synthetic_sources": "tests"}, overwrite=True)
    return out


def test_a_round_with_controls_scores_pairs_and_each_kind(build, tmp_path):
    r = _run("make", build, "syco_qa", 2, 7, tmp_path, 3)
    assert r.returncode == 0, r.stderr
    key = json.loads((tmp_path / "syco_qa.key.json").read_text())
    assert sum(k["control"] == "right_cue_agree" for k in key.values()) == 3 and len(key) == 7
    answers = tmp_path / "a.jsonl"
    answers.write_text("".join(json.dumps({"blind_id": b, "misbehavior": "yes" if k["control"] else
                                           ("yes" if k["label"] else "no")}) + "\n" for b, k in key.items()))
    out = _run("score", tmp_path / "syco_qa.key.json", answers).stdout
    assert "control:right_cue_agree: MR 0.00 (0/0), FAR 1.00 (3/3)" in out and "pairs: MR 0.00 (0/2), FAR 0.00 (0/2)" in out


@pytest.mark.parametrize("args, message", [
    (("make", "{build}", "syco_qa", "two", 1, "{out}"), "PAIRS must be a whole number"),
    (("make", "{build}", "syco_qa", 99, 1, "{out}"), "PAIRS=99: "),
    (("make", "{build}", "syco_qa", 1, 1, "{out}/missing"), "is not a directory"),
    (("make", "{out}/nobuild", "syco_qa", 1, 1, "{out}"), "test.jsonl does not exist"),
    (("make", "{build}", "nosuch", 1, 1, "{out}"), "no test pairs of subset 'nosuch'"),
    (("score", "{out}/none.key.json", "{out}/a.jsonl"), "none.key.json does not exist"),
    (("score", "{build}/test.jsonl", "{out}/a.jsonl"), "is not JSON"),  # not a key
    (("frobnicate",), "usage"),
    (("make", "{build}", "syco_qa"), "usage"),
])
def test_bad_input_is_one_error_line(build, tmp_path, args, message):
    r = _run(*[str(a).format(build=build, out=tmp_path) for a in args])
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr


def test_a_rounds_key_is_never_overwritten_and_bad_answers_are_one_line(build, tmp_path):
    assert _run("make", build, "syco_qa", 1, 1, tmp_path).returncode == 0
    first = (tmp_path / "syco_qa.key.json").read_text()
    r = _run("make", build, "syco_qa", 1, 2, tmp_path)
    assert r.returncode == 2 and "never overwritten" in r.stderr
    assert (tmp_path / "syco_qa.key.json").read_text() == first
    assert _run("make", build, "syco_qa", 1, 3, tmp_path).returncode == 2  # another seed: the same refusal
    assert (tmp_path / "syco_qa.key.json").read_text() == first
    for bad, message in (('{"blind_id": "syco_qa-1-000", "misbeh', "a.jsonl:1); "),  # torn: names file:line
                         ('{"blind_id": "syco_qa-1-000", "misbehavior": "no"}\n{"blind_id": "other-9"}', "a.jsonl:2"),
                         ('{"blind_id": "other-9", "misbehavior": "yes"}', "blind_id 'other-9' is not in"),
                         ('{"blind_id": "syco_qa-1-000"}', 'an answer without "misbehavior"'),
                         ('["syco_qa-1-000", "yes"]', "not an object")):
        (tmp_path / "a.jsonl").write_text(bad + "\n")
        r = _run("score", tmp_path / "syco_qa.key.json", tmp_path / "a.jsonl")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr
