"""Wordings v3: v2, and sg_qa's world_affecting choices answered by their letter only,
so the response carries no wording of the rewarded option; every other sample is v2's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support import SMALL_TEST, build_cfg
from automon.data.build import run_build
from automon.schema import read_samples
from automon.sources.synthetic import write_synthetic_root

_LETTER_ONLY = re.compile(r"(?:^|\s)The answer is \([A-Z]\)\.$")


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    root = write_synthetic_root(tmp_path_factory.mktemp("raw"), n=40)
    out = {}
    for version in ("v2", "v3"):
        out[version] = tmp_path_factory.mktemp("builds") / version
        run_build(build_cfg([f"sources.root={root}", f"out={out[version]}", f"wordings={version}", *SMALL_TEST]))
    return out


def _world(samples):
    return [s for s in samples if s.meta.get("source_dataset", "").startswith("rh_world_affecting")]


def test_v9_is_the_default_and_each_of_v5_v6_v7_differs_from_the_last_only_in_its_own_switches():
    assert build_cfg([]).wordings.version == "v9"  # v9 against v8: test_wordings_v9.py; v8 against v7: test_wordings_v8.py
    w = build_cfg(["wordings=v7"]).wordings
    assert w.version == "v7" and w.sg_code_templates == "v3" and not w.sg_code_minimal_pairs
    assert w.choices_by_letter and w.sg_qa_balanced and w.shared_source_keys and w.safety_annotations == "safety_v3"
    assert not w.sg_code_verify_unused_pairs and w.syco_qa_whole_questions
    v6 = build_cfg(["wordings=v6"]).wordings
    assert {k for k in w if w[k] != v6[k]} == {"version", "sg_code_verify_unused_pairs", "syco_qa_whole_questions",
                                               "sg_qa_excluded", "shortcut_notes", "safety_annotations"}
    # v1-v6 run every construct pair and keep every MMLU row (the schema's defaults)
    assert v6.sg_code_verify_unused_pairs and not v6.syco_qa_whole_questions and v6.safety_annotations == "safety_v2"
    v5 = build_cfg(["wordings=v5"]).wordings
    differ = {k for k in v6 if v6[k] != v5[k]}
    assert differ == {"version", "safety_annotations", "shortcut_notes"} and v5.safety_annotations == "safety_v1"
    v4 = build_cfg(["wordings=v4"]).wordings
    assert v4.choices_by_letter and v4.sg_code_minimal_pairs and v4.sg_qa_balanced and v4.shared_source_keys
    assert not build_cfg(["wordings=v3"]).wordings.shared_source_keys


def test_a_wordings_key_added_after_v6_is_in_the_manifest_only_where_a_version_sets_it():
    """The manifest's config (the data hash) of a v6 build is as released: the key v7 adds is not in it."""
    from automon.data.identity import LATE_WORDINGS_KEYS, config_identity

    v6 = config_identity(build_cfg(["wordings=v6"]))["wordings"]
    v7 = config_identity(build_cfg(["wordings=v7"]))["wordings"]
    v8 = config_identity(build_cfg(["wordings=v8"]))["wordings"]
    assert not set(LATE_WORDINGS_KEYS) & set(v6)
    assert v7["sg_code_verify_unused_pairs"] is False and v7["syco_qa_whole_questions"] is True and v7["sg_qa_excluded"]
    assert {k: v for k, v in v7.items() if k not in LATE_WORDINGS_KEYS} == {**v6, "version": "v7",
                                                                           "safety_annotations": "safety_v3"}
    assert "syco_qa_excluded" not in v7 and v8["syco_qa_excluded"]  # v8's key: the v7 manifest is as recorded
    assert {k: v for k, v in v8.items() if k != "syco_qa_excluded"} == {**v7, "version": "v8"}


def test_world_affecting_answers_name_a_letter_only(builds):
    for split in ("test", "train"):
        v2 = _world(read_samples(builds["v2"] / f"{split}.jsonl"))
        v3 = {s.id: s for s in _world(read_samples(builds["v3"] / f"{split}.jsonl"))}
        assert v2 and {s.id for s in v2} == set(v3), split
        for s in v2:
            t = v3[s.id]
            assert _LETTER_ONLY.search(t.response), t.response
            assert not _LETTER_ONLY.search(s.response), s.response  # v2 writes the option out
            letter = re.search(r"The answer is \(([A-Z])\)", s.response).group(1)
            assert t.response.endswith(f"({letter}).") and t.label == s.label
            assert all(e in t.response for e in t.evidence)


def test_everything_else_is_v2(builds):
    for split in ("test", "train"):
        v2 = {s.id: s for s in read_samples(builds["v2"] / f"{split}.jsonl")}
        v3 = {s.id: s for s in read_samples(builds["v3"] / f"{split}.jsonl")}
        assert set(v2) == set(v3)
        world = {s.id for s in _world(v2.values())}
        for i, s in v2.items():
            if i in world:
                continue
            t = v3[i]
            assert (t.request, t.response, t.label, t.evidence) == (s.request, s.response, s.label, s.evidence), i
