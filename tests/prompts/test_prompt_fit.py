"""One prompt name, one fit-to-length: a long sample's training prompt and the prompt evaluation scores
for it are the same token ids (both prompts, with few-shot examples, responses and requests cut)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support import CONF, compose, cpu_overrides, make_build

from automon.data.io import load_build
from automon.evaluation import evaluate
from automon.evaluation.fewshot import select_shots
from automon.evaluation.requests import render_all
from automon.backends import make_judge
from automon.models.loading import load_tokenizer
from automon.prompts import FIT_VERSION, get_template, prompt_budget
from automon.prompts.templates import TEMPLATES
from automon.training.data import IGNORE_INDEX, ExampleBuilder

PROMPTS = tuple(TEMPLATES)


class Recording:
    """make_judge, keeping every request the evaluation sends to the backend."""

    def __init__(self):
        self.requests = []

    def __call__(self, cfg, kind, adapters, tokenizer):
        inner = make_judge(cfg, kind, adapters, tokenizer)
        outer = self

        class Recorded:
            name, timing = inner.name, inner.timing

            def score(self, reqs):
                outer.requests.extend(reqs)
                return inner.score(reqs)

            def close(self):
                inner.close()

        return Recorded()


@pytest.fixture(scope="module")
def long_build(tmp_path_factory):
    # every other test sample has a response of ~1,500 words: over any limit used below
    return make_build(tmp_path_factory.mktemp("fit") / "build", pairs_per_subset=1, long_every=2, long_words=1500)


@pytest.fixture(scope="module")
def tok():
    from types import SimpleNamespace

    return load_tokenizer(SimpleNamespace(pretrained="tiny", revision=None))


def _prompt_ids(ex) -> list[int]:
    return ex.input_ids[:sum(t == IGNORE_INDEX for t in ex.labels)]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_long_samples_get_the_same_prompt_token_ids_in_training_and_evaluation(tmp_path, long_build, tok, prompt):
    limit = 1400
    out = tmp_path / "o"
    c = compose(cpu_overrides(long_build, out, f"prompt={prompt}", "shots=2", f"backend.max_seq_length={limit}",
                              "backend.max_new_tokens=2"))
    rec = Recording()
    res = evaluate(c, judge_factory=rec)
    build = load_build(long_build)
    train = {s.id: s for s in build.samples("train")}
    test = {s.id: s for s in build.samples("test")}
    doc = json.loads((out / "metrics.json").read_text())
    shots = [train[i] for i in doc["shot_ids"]]
    assert len(shots) == 2 and doc["prompt"] == prompt and doc["prompt_fit"] == FIT_VERSION

    # training's example builder, on the same samples, shots and length limit
    builder = ExampleBuilder(tok, prompt, enable_thinking=False, max_seq_length=limit, shots=shots)
    examples, stats = builder.build_all([test[r.id] for r in rec.requests])
    # what the hf backend scores: the request's prompt text, tokenised (HFJudge._token_ids)
    scored = tok([r.prompt for r in rec.requests], add_special_tokens=False)["input_ids"]
    assert len(scored) == len(test) == 12
    for r, ids, ex in zip(rec.requests, scored, examples):
        assert list(ids) == _prompt_ids(ex), r.id
        assert r.prompt == ex.prompt
    budget = prompt_budget(prompt, limit)
    assert max(map(len, scored)) <= budget
    rows = {p["id"]: p for p in res.predictions["base"]}
    shortened = {ex.sample_id for ex in examples if ex.response_tokens_removed}
    assert len(shortened) == stats.responses_shortened == 6  # the long half, and only it
    assert {i for i, p in rows.items() if p["shortened"]} == shortened
    assert all(rows[ex.sample_id]["shortened"] == ex.response_tokens_removed for ex in examples)
    assert all(len(ids) >= budget - 8 for ids, ex in zip(scored, examples) if ex.sample_id in shortened)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_over_long_requests_are_cut_the_same_way_in_both_stages(tmp_path, long_build, tok, prompt):
    """When the request alone leaves no room, both stages cut it too; render_all is evaluation's path."""
    build = load_build(long_build)
    test = build.samples("test")[:4]
    samples = [dataclasses.replace(s, request=s.request + " please" * 3000) for s in test[:2]] + test[2:]
    shots = select_shots(build.samples("train"), 2, seed=1, test=test)
    limit = 1500
    rendered = render_all(samples, prompt=prompt, shots=shots, tokenizer=tok, enable_thinking=False,
                          max_seq_length=limit)
    examples, stats = ExampleBuilder(tok, prompt, False, limit, shots=shots).build_all(samples)
    assert stats.requests_shortened == 2
    for r, ex in zip(rendered, examples):
        assert tok(r.prompt, add_special_tokens=False)["input_ids"] == _prompt_ids(ex)
        assert r.shortened == ex.response_tokens_removed + ex.request_tokens_removed
        assert len(_prompt_ids(ex)) <= prompt_budget(prompt, limit)
    assert all(ex.request_tokens_removed > 0 for ex in examples[:2])
    assert all(s.request.split(" please")[0] in r.prompt for s, r in zip(samples, rendered))  # head kept
    assert all(shot.response in r.prompt for shot in shots for r in rendered)                 # shots whole


def test_shots_that_leave_no_room_are_an_error_naming_both_settings(tmp_path, long_build):
    c = compose(cpu_overrides(long_build, tmp_path / "o", "shots=6", "backend.max_seq_length=400"))
    from automon.evaluation import EvalError

    with pytest.raises(EvalError, match=r"backend.max_seq_length=400 is too small: .*6 few-shot examples.*"
                                        r"fewer/shorter shots"):
        evaluate(c)


def test_generation_longer_than_the_answer_reserve_fails_at_start_up(long_build, tmp_path):
    from automon.config.eval import ConfigError

    reserve = get_template("evidence_v1").answer_reserve
    with pytest.raises(ConfigError, match=f"backend.max_new_tokens={reserve + 1} is more than the {reserve}"):
        compose(cpu_overrides(long_build, tmp_path, "prompt=evidence_v1", f"backend.max_new_tokens={reserve + 1}"))
    assert compose(cpu_overrides(long_build, tmp_path, "prompt=evidence_v1", f"backend.max_new_tokens={reserve}"))


def test_a_changed_fit_recomputes_only_the_prompts_it_changed(tmp_path, long_build):
    """The cache checks each line against the exact fitted messages: fitting long samples to another
    limit recomputes those, and every short sample keeps its cached prediction."""
    cache = tmp_path / "cache"
    first = evaluate(compose(cpu_overrides(long_build, tmp_path / "a", f"cache_dir={cache}",
                                           "backend.max_seq_length=1400")))
    again = evaluate(compose(cpu_overrides(long_build, tmp_path / "b", f"cache_dir={cache}",
                                           "backend.max_seq_length=1200")))
    n_long = sum(1 for p in first.predictions["base"] if p["shortened"])
    assert n_long == 6 and first.n_computed == 12
    assert again.n_computed == n_long and again.n_cached == 12 - n_long


def test_a_prompt_has_one_name_from_the_registry_to_the_output_paths(tmp_path, long_build):
    """conf/prompt options are exactly the registry's names; the name (no alias) is used everywhere."""
    from automon.training.cli import group_options, preflight

    assert sorted(p.stem for p in (CONF / "prompt").glob("*.yaml")) == sorted(TEMPLATES) == group_options("prompt")
    for name in TEMPLATES:
        c = compose(cpu_overrides(long_build, tmp_path, f"prompt={name}"))
        assert c.prompt.name == name and get_template(name).name == name
    (problem,) = preflight(["prompt=direct"])
    assert "unknown prompt option 'direct'" in problem and "direct_v1" in problem


def test_adapter_metadata_from_before_one_name_reads_as_that_name(tmp_path, long_build):
    """Older automon_adapter.json files stored the same name under `prompt_version` and no fit version."""
    from automon.adapter_meta import ADAPTER_META_FILE, AdapterMeta
    from automon.evaluation.monitors import check_adapter

    AdapterMeta(base_model="tiny", pretrained="tiny", prompt="evidence_v1", enable_thinking=False, subset="sg_qa",
                data_manifest_hash="0" * 64, lora_rank=8, automon_version="old").write(tmp_path)
    old = json.loads((tmp_path / ADAPTER_META_FILE).read_text())
    old["prompt_version"] = old.pop("prompt")
    del old["prompt_fit"]
    (tmp_path / ADAPTER_META_FILE).write_text(json.dumps(old))
    meta = AdapterMeta.read(tmp_path)
    assert (meta.prompt, meta.prompt_fit) == ("evidence_v1", "")
    c = compose(cpu_overrides(long_build, tmp_path / "o", "prompt=direct_v1"))
    assert check_adapter(meta, c) == ["prompt: trained with prompt=evidence_v1, evaluating prompt=direct_v1"]
