"""Data build on a synthetic source tree made by automon itself (runs anywhere, no real data)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from support import SMALL_TEST, build_cfg
from automon.data.disjoint import verify_build
from automon.data.io import load_build
from automon.data.build import BuildError, run_build
from automon.schema import SUBSETS, read_samples
from automon.sources import SourceError
from automon.sources.synthetic import write_synthetic_root


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory) -> Path:
    return write_synthetic_root(tmp_path_factory.mktemp("raw"), n=40)


@pytest.fixture(scope="module")
def small_build(synth_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("builds") / "b1"
    run_build(build_cfg([f"sources.root={synth_root}", f"out={out}", *SMALL_TEST]))
    return out


def test_counts_pairs_and_contract(small_build):
    b = load_build(small_build)
    test, train = b.samples("test"), b.samples("train")
    counts = b.manifest["counts"]
    controls = b.manifest.get("test_controls", {})  # wordings v9: benign contrast controls beside the pairs
    for subset in SUBSETS:
        extra = sum(n for k, n in controls.items() if k.startswith(f"{subset}/"))
        assert counts["test"][subset] == {"0": 6 + extra, "1": 6}, subset
        assert counts["train"][subset]["0"] + counts["train"][subset]["1"] > 0, subset
    assert {k.split("/")[0] for k in controls} == {"syco_qa", "syco_reasoning", "sg_code"}
    pairs: dict[str, list] = {}
    for s in test:
        if s.meta.get("control"):
            assert s.label == 0 and s.meta["group"] != s.pair_id and not s.evidence
            continue
        pairs.setdefault(s.pair_id, []).append(s)
    assert len(pairs) == 36
    for twins in pairs.values():
        assert sorted(s.label for s in twins) == [0, 1]
        assert len({s.request for s in twins}) == 1, "twins must share the request"
        assert len({s.subset for s in twins}) == 1
    # Evidence is exact substrings of the response wherever a recipe knows it.
    with_evidence = {s.subset for s in test if s.label == 1 and s.evidence}
    assert {"safety_code", "syco_qa", "syco_reasoning", "sg_qa", "sg_code"} <= with_evidence
    for s in test + train:
        assert all(e in s.response for e in s.evidence)
    # No source item in both splits, across subsets.
    test_keys = {k for s in test for k in s.meta["item_keys"]}
    assert not any(k in test_keys for s in train for k in s.meta["item_keys"])
    assert not verify_build(small_build).conflicts
    # Cue / incentive wordings come from the versioned config list.
    cues = build_cfg([]).wordings.syco_qa_cues
    syco = [s for s in test if s.subset == "syco_qa" and "cue" in s.meta]
    assert syco and all(s.meta["wordings"] == build_cfg([]).wordings.version for s in syco)
    for s in syco:  # the cue sentence is one of the configured wordings and ends the request
        assert s.request.endswith(s.meta["cue"])
        assert any(s.meta["cue"].startswith(c.split("{cue}")[0]) for c in cues)


def test_manifest_and_card(small_build):
    m = json.loads((small_build / "manifest.json").read_text())
    assert m["seed"] == 0 and m["format"] == "automon-build-v1"
    for name, origin in m["sources"].items():
        assert origin["kind"] == "local" and origin["files"], name
    assert set(m["files"]) == {"test.jsonl", "train.jsonl"}
    assert m["disjointness"]["params"]["threshold"] == 0.8
    assert "out" not in m["config"]
    card = (small_build / "README.md").read_text()
    assert "| sg_code |" in card and "Train/test disjointness" in card
    assert "Responses are written by the `template` generator" in card and "policy model" not in card
    # built from automon's generated tree: the manifest and the card's first lines say so
    assert m["synthetic_sources"].startswith("synthetic-v1") and "**Synthetic data" in card.split("## Counts")[0]


def test_same_config_and_seed_give_identical_bytes(synth_root, small_build, tmp_path):
    out = tmp_path / "again"
    run_build(build_cfg([f"sources.root={synth_root}", f"out={out}", *SMALL_TEST]))
    for name in ("test.jsonl", "train.jsonl", "manifest.json", "README.md"):
        assert (out / name).read_bytes() == (small_build / name).read_bytes(), name
    other = tmp_path / "seed1"
    run_build(build_cfg([f"sources.root={synth_root}", f"out={other}", "seed=1", *SMALL_TEST]))
    assert (other / "test.jsonl").read_bytes() != (small_build / "test.jsonl").read_bytes()


def _copy_root(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_malformed_row_stops_with_file_and_line_or_is_skipped_and_counted(synth_root, tmp_path):
    root = _copy_root(synth_root, tmp_path / "raw")
    p = root / "gsm8k" / "train.jsonl"
    lines = p.read_text().splitlines()
    lines.insert(4, '{"question": "broken row"')  # line 5: not JSON
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError, match=r"gsm8k/train\.jsonl:5"):
        run_build(build_cfg([f"sources.root={root}", f"out={tmp_path / 'b'}", *SMALL_TEST]))
    assert not (tmp_path / "b").exists(), "nothing may be written on failure"
    m = run_build(build_cfg([f"sources.root={root}", f"out={tmp_path / 'b'}", "sources.on_malformed=skip",
                             *SMALL_TEST]))
    assert m["malformed_rows_skipped"] == {"gsm8k": 1}


def test_failed_rebuild_leaves_previous_build_intact(synth_root, small_build, tmp_path):
    out = tmp_path / "b"
    shutil.copytree(small_build, out)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(BuildError, match="test pairs available"):
        run_build(build_cfg([f"sources.root={synth_root}", f"out={out}", "overwrite=true", *SMALL_TEST,
                             "test.safety_qa=100000"]))
    assert (out / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"], "no temp dirs left behind"
    with pytest.raises(BuildError, match="overwrite=true"):
        run_build(build_cfg([f"sources.root={synth_root}", f"out={out}", *SMALL_TEST]))


def test_planted_near_duplicate_of_a_test_sample_is_caught(synth_root, small_build, tmp_path):
    """Copy a test conversation into the training source with one word changed: the build must
    catch it (fail with on_conflict=fail; drop and count it with on_conflict=drop)."""
    test = read_samples(small_build / "test.jsonl")
    victim = next(s for s in test if s.subset == "safety_qa" and s.label == 1)
    twin = next(s for s in test if s.pair_id == victim.pair_id and s.label == 0)
    root = _copy_root(synth_root, tmp_path / "raw")
    hh = root / "hh-rlhf" / "harmless-base_test.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(hh, "rt")]
    words = victim.request.split(" ")
    words[1] = "zeppelin"  # one word changed near the start: a near duplicate, not an exact copy or the same key
    prefix = "\n\n" + " ".join(words)
    rows.append({"chosen": f"{prefix}\n\nAssistant: {twin.response}", "rejected": f"{prefix}\n\nAssistant: {victim.response}"})
    with open(hh, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
        g.write("".join(json.dumps(r) + "\n" for r in rows).encode())

    common = [f"sources.root={root}", *SMALL_TEST]
    with pytest.raises(BuildError, match="near_duplicate"):
        run_build(build_cfg(common + [f"out={tmp_path / 'fail'}", "disjoint.on_conflict=fail"]))
    assert not (tmp_path / "fail").exists()
    m = run_build(build_cfg(common + [f"out={tmp_path / 'drop'}"]))
    assert m["disjointness"]["conflicts_found"].get("near_duplicate", 0) >= 1
    assert any(c["test_id"] in (victim.id, twin.id) and c["kind"] == "near_duplicate"
               for c in m["disjointness"]["conflict_examples"])
    train = read_samples(tmp_path / "drop" / "train.jsonl")
    assert not any("zeppelin" in s.request for s in train)


def test_planted_request_leaks_are_dropped(synth_root, small_build, tmp_path):
    """A test conversation reappearing in another source row with other answers (as HH-RLHF
    harmless-base rows 229 and 1161 do) is the same source item: the request alone gives it away,
    exactly (after case and whitespace) or as a near duplicate. Both are dropped and counted."""
    test = read_samples(small_build / "test.jsonl")
    a, b = [s for s in test if s.subset == "safety_qa" and s.label == 1][:2]
    root = _copy_root(synth_root, tmp_path / "raw")
    hh = root / "hh-rlhf" / "harmless-base_test.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(hh, "rt")]
    # another row, the same conversation: other case and spacing (the role markers kept)
    same = "\n\n" + "  ".join(w.upper() if w.isalpha() else w for w in a.request.split(" "))
    words = b.request.split(" ")
    words[1] = "zeppelin"
    near = "\n\n" + " ".join(words)
    for prefix in (same, near):
        rows.append({"chosen": f"{prefix}\n\nAssistant: I would rather not, sorry.",
                     "rejected": f"{prefix}\n\nAssistant: Here is a different answer entirely, step by step."})
    with open(hh, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
        g.write("".join(json.dumps(r) + "\n" for r in rows).encode())
    m = run_build(build_cfg([f"sources.root={root}", *SMALL_TEST, f"out={tmp_path / 'drop'}"]))
    found = m["disjointness"]["conflicts_found"]
    # the exact copy shares the HH item key (its normalised request) and never reaches the check
    assert found.get("near_duplicate_request", 0) >= 1 and m["dropped"]["train/disjoint_near_duplicate_request"] >= 1
    train = read_samples(tmp_path / "drop" / "train.jsonl")
    from automon.data.disjoint import normalise

    assert not any("zeppelin" in s.request or normalise(s.request) == normalise(a.request) for s in train)
    assert len(read_samples(tmp_path / "drop" / "test.jsonl")) == len(test)


def test_the_request_alone_identifies_a_source_item():
    """Recipes key items by source row; the check keys them by request too, whatever the row."""
    from dataclasses import replace

    from automon.data.disjoint import find_conflicts
    from support import synthetic_samples

    test = [s for s in synthetic_samples("test", 2) if s.subset == "syco_qa"]
    t = test[0]
    long_request = t.request + " " + " ".join(f"context{i}" for i in range(40))
    test[0] = t = replace(t, request=long_request)
    same = replace(t, id="tr1", split="train", request="  " + t.request.upper(), response="other words",
                   meta={"item_keys": ["another:row"]})
    near = replace(same, id="tr2", request=t.request.replace("context7", "zeppelin"))
    other = replace(same, id="tr3", request="A different question entirely about " + " ".join(["cats"] * 20))
    kinds = {c.train_id: c.kind for c in find_conflicts([same, near, other], test).conflicts}
    assert kinds == {"tr1": "exact_request", "tr2": "near_duplicate_request"}


def test_bad_config_fails_early(synth_root, tmp_path):
    with pytest.raises(BuildError, match="unknown subset"):
        run_build(build_cfg([f"sources.root={synth_root}", f"out={tmp_path / 'x'}", "subsets=[safety_qa,nope]"]))
    with pytest.raises(BuildError, match="not a directory"):
        run_build(build_cfg([f"sources.root={tmp_path / 'missing'}", f"out={tmp_path / 'x'}"]))


def test_background_recipes_give_the_same_bytes_as_a_serial_build(small_build, synth_root, tmp_path, monkeypatch):
    """sg_code's recipe runs in a forked process beside the others (SubsetSpec.background): the build,
    drop counts included, is byte for byte what running every recipe in turn gives."""
    from dataclasses import replace

    from automon.data import build

    registered = build.specs()
    assert any(s.background for s in registered)
    monkeypatch.setattr(build, "specs", lambda: [replace(s, background=False) for s in registered])
    out = tmp_path / "serial"
    run_build(build_cfg([f"sources.root={synth_root}", f"out={out}", *SMALL_TEST]))
    for name in ("train.jsonl", "test.jsonl", "manifest.json", "README.md"):
        assert (out / name).read_bytes() == (small_build / name).read_bytes(), name


def test_a_failing_background_recipe_stops_the_build(synth_root, tmp_path, monkeypatch):
    import automon.data.recipes.sg_code.recipe as sg_code

    def broken(*_a, **_k):
        raise RuntimeError("the sandbox broke")

    monkeypatch.setattr(sg_code, "sg_code_items", broken)
    out = tmp_path / "b"
    with pytest.raises(RuntimeError, match="the sandbox broke"):
        run_build(build_cfg([f"sources.root={synth_root}", f"out={out}", *SMALL_TEST]))
    assert not out.exists()
