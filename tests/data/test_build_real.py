"""The full local build from ../shared/data/raw (skipped when the real data is absent)."""

from __future__ import annotations

import pytest

from support import RAW, needs_raw
from automon.schema import SUBSETS

pytestmark = [needs_raw, pytest.mark.realdata]


# real_build: tests/data/conftest.py (one build per session, shared with test_near_duplicates.py)


def test_paper_proportions_and_pairs(real_build):
    c = real_build.manifest["counts"]
    pairs = {"safety_qa": 293, "safety_code": 293, "syco_qa": 241, "syco_reasoning": 240, "sg_qa": 219, "sg_code": 219}
    for s, n in pairs.items():
        assert c["test"][s] == {"0": n, "1": n}, s
    by_cat: dict[str, int] = {}
    for s, (cat, _) in SUBSETS.items():
        by_cat[cat] = by_cat.get(cat, 0) + sum(c["test"][s].values())
    assert by_cat == {"safety": 1172, "sycophancy": 962, "spec_gaming": 876}
    assert sum(by_cat.values()) == 3010


def test_training_corpus_is_large_and_disjoint(real_build):
    c = real_build.manifest["counts"]["train"]
    n_train = sum(v for sub in c.values() for v in sub.values())
    assert n_train >= 30_000, n_train  # "tens of thousands" from the local sources
    for s in SUBSETS:
        assert c[s]["1"] > 0, s
    test = real_build.samples("test")
    train = real_build.samples("train")
    test_keys = {k for t in test for k in t.meta["item_keys"]}
    assert not any(k in test_keys for s in train for k in s.meta["item_keys"])
    dj = real_build.manifest["disjointness"]
    assert dj["conflicts_dropped"] == sum(dj["conflicts_found"].values())


def test_manifest_records_local_sources_with_hashes(real_build):
    sums = {}
    for line in (RAW / "SHA256SUMS").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        sums[path.lstrip("*").removeprefix("data/raw/")] = digest
    for name, origin in real_build.manifest["sources"].items():
        for rel, digest in origin["files"].items():
            assert sums[rel] == digest, (name, rel)


def test_every_sg_code_sample_was_verified(real_build):
    samples = [s for s in real_build.samples("test") + real_build.samples("train") if s.subset == "sg_code"]
    assert samples
    for s in samples:
        if s.meta.get("source_dataset") in ("humaneval", "mbpp"):
            v = s.meta["verification"]
            assert v["visible"] == "pass", s.id
            assert v["hidden"] == ("fail" if s.label == 1 else "pass"), s.id


def test_the_default_templates_meet_the_ceiling_or_say_why(real_build):
    """The goal on the default build: no word n-gram baseline reads the label from the response
    (every subset's word member under both ceilings), and any subset another member puts over the
    ceiling is named in the card with its rates and its wordings version's reason."""
    from automon.data.audit import members_of

    audit = real_build.manifest["audit"]
    card = (real_build.path / "README.md").read_text()
    ceiling = audit["ceiling"]
    for sub, r in audit["subsets"].items():
        word = members_of(r)["word"]
        assert word["auroc"] <= ceiling["auroc"] and word["pair_accuracy"] <= ceiling["pair_accuracy"], sub
    for sub in audit["exceeding"]:
        r = audit["subsets"][sub]
        rates = ", ".join(f"{m} {members_of(r)[m]['auroc']:.2f} / {members_of(r)[m]['pair_accuracy']:.2f}"
                          for m in r["exceeded_by"])
        line = f"- **{sub}** is over the ceiling ({rates}): "
        assert line in card, (sub, rates)
        assert "no reason recorded" not in card.split(line)[1].split("\n")[0]