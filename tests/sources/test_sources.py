"""Source readers: the local path, the hub/URL path (exercised with local files through the same
code, since the hub is unreachable here), hub column mappings, and malformed-row reporting."""

from __future__ import annotations

import dataclasses
import json

import pytest

from support import RAW, needs_raw
from automon.sources import SOURCES, SourceError, read_source
from automon.sources.read import _iter_hub, local_files
from automon.sources.registry import _mmlu_from_hub, _truthfulqa_from_hub
from automon.sources.synthetic import write_synthetic_root


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return write_synthetic_root(tmp_path_factory.mktemp("raw"), n=12)


@pytest.mark.parametrize("name", ["sven", "cyberseceval_instruct", "rh_sycophancy_fact", "caa_sycophancy",
                                  "anthropic_political_typology", "rh_code_problems_hardcoded"])
def test_url_path_reads_the_same_rows_as_the_local_path(name, synth):
    """Sources without a hub copy are read from their upstream URLs with `datasets`; pointing that
    same code at the local files must give the same records as the local reader."""
    spec = SOURCES[name]
    files = [str(p) for p in local_files(spec, synth)]
    via_datasets = [rec for _, _, rec in _iter_hub(dataclasses.replace(spec, urls=tuple(files)))]
    local = [row.data for row in read_source(name, synth)]
    assert len(via_datasets) == len(local) > 0
    for a, b in zip(via_datasets, local):
        assert {k: a[k] for k in spec.required} == {k: b[k] for k in spec.required}


def test_hub_rows_are_mapped_to_the_local_layout():
    tqa = _truthfulqa_from_hub({"type": "Adversarial", "category": "Misconceptions", "question": "Q?",
                                "best_answer": "B", "correct_answers": ["B", "C"], "incorrect_answers": ["X", "Y"],
                                "source": "s"})
    assert tqa["Question"] == "Q?" and tqa["Incorrect Answers"] == "X; Y" and tqa["Best Answer"] == "B"
    mm = _mmlu_from_hub({"question": "q", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 2})
    assert mm == {"question": "q", "A": "a", "B": "b", "C": "c", "D": "d", "answer": "C", "subject": "anatomy"}
    for name, spec in SOURCES.items():
        assert spec.hub_id or spec.urls, f"{name} has no hub or URL origin for users without local files"



def test_every_source_makes_synthetic_rows_its_reader_reads(synth):
    """Each SourceSpec carries its synthetic generator (SourceSpec.synthetic): the tests and the
    offline smoke pipeline build every subset from them."""
    for name, spec in SOURCES.items():
        assert spec.synthetic is not None, f"{name} has no synthetic generator"
        assert sum(1 for _ in read_source(name, synth)) > 0, name


def test_a_source_without_synthetic_rows_is_named(monkeypatch, tmp_path):
    from automon.sources import SourceSpec

    monkeypatch.setitem(SOURCES, "toy_src", SourceSpec("toy_src", ("toy/x.jsonl",), "jsonl", ("q",)))
    with pytest.raises(ValueError, match="source toy_src has no synthetic rows: give its SourceSpec a `synthetic`"):
        write_synthetic_root(tmp_path / "raw", n=4)


def test_malformed_rows_name_file_and_line(synth, tmp_path):
    p = tmp_path / "rh" / "reward-hack-generalization" / "reward_hack"
    p.mkdir(parents=True)
    good = json.dumps({"prompt_list": ["x"], "high_reward_answer": "A", "other_answers": ["B"]})
    (p / "sycophancy_fact.jsonl").write_text(f"{good}\n{json.dumps({'prompt_list': ['y']})}\n{good}\n")
    root = tmp_path / "rh"
    with pytest.raises(SourceError, match=r"missing field.*sycophancy_fact\.jsonl:2\)"):
        list(read_source("rh_sycophancy_fact", root))
    counts: dict = {}
    assert len(list(read_source("rh_sycophancy_fact", root, "skip", counts))) == 2
    assert counts == {"rh_sycophancy_fact": 1}
    with pytest.raises(SourceError, match="no file matches"):
        list(read_source("mbpp", root))


@needs_raw
@pytest.mark.realdata
def test_real_sources_parse_with_documented_row_counts():
    """Row counts from shared/data/raw/SOURCES.md."""
    expected = {"hh_rlhf_harmless": 2312, "humaneval": 164, "mbpp": 974, "gsm8k": 7473 + 1319, "truthfulqa": 817,
                "mmlu": 14042 + 285, "cyberseceval_instruct": 1916, "securityeval": 121, "caa_sycophancy": 1200,
                "anthropic_political_typology": 10200, "rh_sycophancy_fact": 401, "rh_email_assistant": 500}
    for name, n in expected.items():
        assert sum(1 for _ in read_source(name, RAW)) == n, name
