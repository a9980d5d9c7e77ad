"""The two-annotator round trip: blinded export, label import, Cohen's kappa, agreed pairs kept."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sklearn.metrics import cohen_kappa_score

from support import REPO, build_cfg, make_build
from automon.data.build import run_build
from automon.sources.synthetic import write_synthetic_root
from automon.data.annotate import AnnotationError, ExportConfig, ImportConfig, cohen_kappa, export, import_labels, item_id
from automon.data.io import load_build


def _run(*args):
    return subprocess.run([sys.executable, str(REPO / "data_build/annotate.py"), *args], capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})


def _fill(path, label_of):
    rows = [json.loads(x) for x in open(path)]
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({**r, "label": label_of(r["item"])}) + "\n")


def test_round_trip_kappa_and_agreed_pairs(tmp_path):
    root = write_synthetic_root(tmp_path / "raw", n=40)
    build = tmp_path / "b"
    run_build(build_cfg([f"sources.root={root}", f"out={build}", "subsets=[safety_qa,sg_qa]", "test.safety_qa=2",
                         "test.sg_qa=6"]))
    p = _run("export", f"build={build}", "annotators=2", f"out={tmp_path / 'ann'}")
    assert p.returncode == 0, p.stderr
    test = load_build(build).samples("test")
    sg = [s for s in test if s.subset == "sg_qa"]
    truth = {item_id(s.id): s.label for s in sg}
    f1, f2 = (tmp_path / "ann" / f"annotator_{k}.jsonl" for k in (1, 2))
    rows1, rows2 = ([json.loads(x) for x in open(f)] for f in (f1, f2))
    # Blinded: only item, request, response and an empty label; the two orders differ.
    assert all(set(r) == {"item", "request", "response", "label"} and r["label"] is None for r in rows1 + rows2)
    assert sorted(r["item"] for r in rows1) == sorted(truth) and [r["item"] for r in rows1] != [r["item"] for r in rows2]
    # (synthetic requests start with their sample id, so only the pair and the label fields are checked)
    assert not any(s.pair_id in json.dumps(rows1) for s in sg) and not set(truth) & {s.id for s in sg}

    items = sorted(truth)
    flip1, flip2 = {items[0], items[3]}, {items[3], items[5], items[7]}  # items[3]: both wrong, so they agree
    _fill(f1, lambda i: 1 - truth[i] if i in flip1 else truth[i])
    _fill(f2, lambda i: 1 - truth[i] if i in flip2 else truth[i])
    p = _run("import", f"build={build}", f"labels={tmp_path / 'ann'}", f"out={tmp_path / 'agreed'}")
    assert p.returncode == 0, p.stderr
    out = load_build(tmp_path / "agreed", verify=("test", "train"))
    a = out.manifest["annotation"]
    l1 = [1 - truth[i] if i in flip1 else truth[i] for i in items]
    l2 = [1 - truth[i] if i in flip2 else truth[i] for i in items]
    assert a["cohen_kappa"] == pytest.approx(cohen_kappa_score(l1, l2))
    assert a["raw_agreement"] == pytest.approx(sum(x == y for x, y in zip(l1, l2)) / len(items))
    bad = flip1 | flip2  # disagreements, plus items[3] where both contradict the label
    assert a["agreed_against_label"] == 1 and a["agreed_and_match_label"] == len(items) - len(bad)
    bad_pairs = {s.pair_id for s in sg if item_id(s.id) in bad}
    kept = [s for s in out.samples("test") if s.subset == "sg_qa"]
    assert {s.pair_id for s in kept} == {s.pair_id for s in sg} - bad_pairs and len(kept) == 2 * (6 - len(bad_pairs))
    assert a["test_pairs_kept"] == 6 - len(bad_pairs)
    # Other subsets and the training split are unchanged.
    assert [s.id for s in out.samples("test") if s.subset != "sg_qa"] == [s.id for s in test if s.subset != "sg_qa"]
    assert [s.id for s in out.samples("train")] == [s.id for s in load_build(build).samples("train")]
    assert "## Annotation" in (tmp_path / "agreed" / "README.md").read_text()


def test_kappa_matches_sklearn_and_degenerate_case():
    for a, b in [([1, 0, 1, 1, 0, 0], [1, 0, 0, 1, 0, 1]), ([1, 1, 1, 0], [1, 1, 0, 0]), ([0, 1], [1, 0])]:
        assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))
    assert cohen_kappa([1, 1], [1, 1]) is None


def test_import_errors_name_file_and_line(tmp_path):
    build = make_build(tmp_path / "b", pairs_per_subset=2)
    export(ExportConfig(build=str(build), out=str(tmp_path / "ann")))
    f1 = tmp_path / "ann" / "annotator_1.jsonl"
    _fill(f1, lambda i: 1)
    _fill(tmp_path / "ann" / "annotator_2.jsonl", lambda i: "yes")
    with pytest.raises(AnnotationError, match=r"label 'yes'.*annotator_2.jsonl:1"):
        import_labels(ImportConfig(build=str(build), labels=str(tmp_path / "ann"), out=str(tmp_path / "o")))
    p = _run("export", f"build={build}", "anotators=2")
    assert p.returncode == 2 and "valid keys for export" in p.stderr


def test_a_file_where_a_directory_goes_and_a_torn_export_record_are_one_line(tmp_path):
    """annotate.py export out=<a file> and import of a torn export.json were tracebacks."""
    build = make_build(tmp_path / "b", pairs_per_subset=1)
    (tmp_path / "afile").write_text("x")
    p = _run("export", f"build={build}", f"out={tmp_path / 'afile'}")
    assert p.returncode == 2 and p.stderr.startswith("error: out=") and "is a file" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and (tmp_path / "afile").read_text() == "x"
    export(ExportConfig(build=str(build), out=str(tmp_path / "ann")))
    info = tmp_path / "ann" / "export.json"
    text = info.read_text()
    for bad, needle in ((text[:len(text) // 2], "export.json is not JSON"),
                        (json.dumps({"build": "x"}), "lacks build_manifest_sha256, subsets, annotators")):
        info.write_text(bad)
        p = _run("import", f"build={build}", f"labels={tmp_path / 'ann'}", f"out={tmp_path / 'o'}")
        assert p.returncode == 2 and "Traceback" not in p.stderr and needle in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
