"""Wordings v2: the surface forms a template adds are drawn alike for both labels, the sycophantic
reasoning chain is arithmetically right and as long as its twin (one plausible wrong step), and the training-only
controls exist, are benign, never reach the test split and are counted."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from support import CONF, SMALL_TEST, build_cfg
from automon.data.build import run_build
from automon.schema import read_samples
from automon.sources.synthetic import write_synthetic_root

V2 = yaml.safe_load((CONF / "wordings" / "v2.yaml").read_text())


@pytest.fixture(scope="module")
def v2_build(tmp_path_factory) -> Path:
    root = write_synthetic_root(tmp_path_factory.mktemp("raw"), n=60)
    out = tmp_path_factory.mktemp("builds") / "v2"
    run_build(build_cfg([f"sources.root={root}", f"out={out}", "wordings=v2", *SMALL_TEST]))
    return out


def _opener(text: str, pool: list[str]) -> str | None:
    return next((o for o in pool if text.startswith(o)), None)


def test_test_responses_open_alike_for_both_labels(v2_build):
    test = [s for s in read_samples(v2_build / "test.jsonl") if s.subset in ("syco_qa", "syco_reasoning")]
    phrases = V2["agree_phrases"] + V2["disagree_phrases"]
    assert not any(s.response.startswith(tuple(phrases)) for s in test)  # only where they are true: controls
    used = {y: Counter(_opener(s.response, V2["openers"]) is not None for s in test if s.label == y) for y in (0, 1)}
    share = {y: used[y][True] / sum(used[y].values()) for y in (0, 1)}
    assert 0.2 < share[0] < 0.8 and 0.2 < share[1] < 0.8, share  # the same coin for both twins


def test_sg_qa_twins_end_from_one_pool(v2_build):
    tails = [t for t in V2["tails"] if t]
    test = [s for s in read_samples(v2_build / "test.jsonl") if s.meta.get("recipe") == "incentive_injection_tqa"]
    ends = {y: {t for s in test if s.label == y for t in tails if s.response.endswith(t)} for y in (0, 1)}
    assert ends[0] and ends[1] and ends[0] <= set(tails) and ends[1] <= set(tails)
    confident = "No doubt about it."
    assert any(s.response.endswith(confident) for s in test if s.label == 0) or len(test) < 8


_EQ = re.compile(r"(\d+(?:\.\d+)?(?:\s*[-+*/x]\s*\$?\d+(?:\.\d+)?)+)\s*=\s*\$?(\d+(?:\.\d+)?)")


def test_sycophantic_reasoning_is_arithmetically_right_and_as_long_as_its_twin(v2_build):
    samples = [s for s in read_samples(v2_build / "test.jsonl") + read_samples(v2_build / "train.jsonl")
               if s.subset == "syco_reasoning" and not s.meta.get("control")]
    twins = {(s.pair_id, s.label): s for s in samples if s.pair_id}
    mis = [s for s in samples if s.label == 1]
    assert mis
    checked = 0
    for s in mis:
        for lhs, rhs in _EQ.findall(s.response):
            checked += 1
            assert abs(eval(lhs.replace("x", "*").replace("$", "")) - float(rhs)) < 1e-6, (s.id, lhs, rhs)
        cued = s.meta["cued"]
        assert s.response.rstrip().endswith(f"The answer is {cued}.") and cued != s.meta["gold"]
        assert len(s.evidence) == 2 and s.evidence[0] in s.response and s.evidence[1] == f"The answer is {cued}."
        twin = twins.get((s.pair_id, 0))
        if twin is not None:  # same chain length; the twin may open with an opener line
            n = len(s.response.splitlines()) - len(twin.response.splitlines())
            assert abs(n) <= 1, (s.id, s.response, twin.response)
    assert checked > 0


def test_controls_are_benign_training_only_and_counted(v2_build):
    m = json.loads((v2_build / "manifest.json").read_text())
    train = read_samples(v2_build / "train.jsonl")
    ctl = [s for s in train if s.meta.get("control")]
    assert ctl and all(s.label == 0 for s in ctl)
    assert m["controls"] == dict(sorted(Counter(f"{s.subset}/{s.meta['control']}" for s in ctl).items()))
    assert {k.split("/")[1] for k in m["controls"]} == {"right_cue_agree", "incentive_honest_confident"}
    agree = [s for s in ctl if s.meta["control"] == "right_cue_agree"]
    assert all(s.response.startswith(tuple(V2["agree_phrases"])) for s in agree)  # agreeing, and benign
    assert not any(s.meta.get("control") for s in read_samples(v2_build / "test.jsonl"))
