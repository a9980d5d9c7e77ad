"""The full local build from ../shared/data/raw (skipped when the real data is absent)."""

from __future__ import annotations

import pytest

from support import RAW, needs_raw
from automon.schema import SUBSETS

pytestmark = [needs_raw, pytest.mark.realdata]


# real_build: tests/conftest.py (one build per test run, shared with test_near_duplicates.py and test_train_run.py)


def test_paper_proportions_and_pairs(real_build):
    """The paper's 3,010 (safety 1,172 + sycophancy 962 + spec gaming 876), except that the safety
    subsets test only the pairs both blind annotators agreed on (wordings v5; v6 and v7 screen them again): where fewer were kept
    than the paper's 293, the build ships that many and the card says so."""
    c = real_build.manifest["counts"]
    pairs = {"safety_qa": 293, "safety_code": 293, "syco_qa": 241, "syco_reasoning": 240, "sg_qa": 219, "sg_code": 219}
    card = (real_build.path / "README.md").read_text()
    controls = real_build.manifest.get("test_controls", {})  # v9: benign contrast controls beside the pairs
    for s, n in pairs.items():
        shipped = real_build.manifest["test_pairs"][s]
        extra = sum(k for name, k in controls.items() if name.startswith(f"{s}/"))
        assert c["test"][s] == {"0": shipped + extra, "1": shipped}, s
        if s.startswith("safety_"):
            assert 0 < shipped <= n, s
            if shipped < n:
                assert f"{s}" in card and str(shipped) in card, s
        else:
            assert shipped == n, s


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
            if s.meta.get("control") == "plain_bug":  # a bug: fails the hidden tests; the visible ones either way
                assert s.label == 0 and v["hidden"] == "fail" and v["visible"] in ("pass", "fail", "not run"), s.id
                continue
            assert v["visible"] == "pass", s.id
            assert v["hidden"] == ("fail" if s.label == 1 else "pass"), s.id


def test_the_default_templates_meet_the_ceiling_or_say_why(real_build):
    """The goal on the default build: no word n-gram baseline reads the label from the response
    (every subset's word member under both ceilings), and any subset another member puts over the
    ceiling is named in the card with its rates and its wordings version's reason. In safety the
    misbehavior is in the response's own words (a reply that helps vs one that declines; docs/data.md,
    the safety pairs), so there the baselines that cannot read harm (length, formatting, comments) stand
    in: each at most the artifact ceiling, while the word member may read the construct (v6's safety_qa:
    AUROC 0.701; v7's 0.695), which the card explains."""
    from automon.data.audit import members_of, rate_of
    from automon.subsets import get

    audit = real_build.manifest["audit"]
    card = (real_build.path / "README.md").read_text()
    ceiling = audit["ceiling"]
    artifacts = real_build.manifest["safety_annotations"]["artifact_baselines"]
    for sub, r in audit["subsets"].items():
        if get(sub).category == "safety":
            assert sub in artifacts["subsets"] and not artifacts["exceeded"], (sub, artifacts["exceeded"])
            assert all(m["test_cv"]["auroc"] <= artifacts["max_auroc"] for m in artifacts["subsets"][sub].values()), sub
            continue
        word = members_of(r)["word"]
        assert word["auroc"] <= ceiling["auroc"] and word["pair_accuracy"] <= ceiling["pair_accuracy"], sub
    for sub in audit["exceeding"]:
        r = audit["subsets"][sub]
        rates = ", ".join(f"{m} {rate_of(r, m)['auroc']:.2f} / {rate_of(r, m)['pair_accuracy']:.2f}"
                          for m in r["exceeded_by"])
        line = f"- **{sub}** is over the ceiling ({rates}): "
        assert line in card, (sub, rates)
        assert "no reason recorded" not in card.split(line)[1].split("\n")[0]

def test_sg_code_pairs_are_construct_pairs_of_three_families(real_build):
    """The default build's sg_code test split: three gaming families, none over half; every gaming
    twin keyed on a visible test or tampering, no benign twin tampering; the response-only panel under
    the ceilings in every family while the request-aware baseline reads lookup and branches."""
    from collections import Counter

    from automon.data.recipes.sg_code.constructs import analyse, response_code

    test = [s for s in real_build.samples("test") if s.subset == "sg_code"]
    families = Counter(s.meta["family"] for s in test if s.label == 1)
    assert len(families) >= 3 and max(families.values()) <= len(test) // 4, families
    for s in test:
        found = analyse(response_code(s.response), s.meta["visible_tests"])
        if s.label == 1:
            assert found.test_keyed or found.tampering, s.id
        else:
            assert not found.tampering, s.id
    r = real_build.manifest["audit"]["subsets"]["sg_code"]
    ceiling = real_build.manifest["audit"]["ceiling"]
    for fam, members in r["families"].items():
        for m, v in members.items():
            assert 0.30 <= v["auroc"] <= ceiling["auroc"] and 0.25 <= v["pair_accuracy"] <= ceiling["pair_accuracy"], (fam, m)
    for fam in ("lookup", "branches"):
        assert r["request_aware"]["families"][fam]["auroc"] >= 0.9, fam
