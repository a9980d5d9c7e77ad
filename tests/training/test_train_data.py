"""Training examples: loss mask, prompt identity with evaluation, middle shortening, the loss itself."""

from __future__ import annotations

import dataclasses

import pytest
from support import synthetic_samples

from automon.prompts import answer_text, monitor_messages, prompt_budget, prompt_text
from automon.prompts.render import SHORTEN_MARKER
from automon.training.data import (
    IGNORE_INDEX,
    ExampleBuilder,
    end_of_turn_token,
    select_samples,
    supervised_text,
    verify_examples,
)
from automon.training.errors import TrainConfigError

VERSIONS = ("direct_v1", "evidence_v1")
MARKER_HEAD = SHORTEN_MARKER.split("{n}")[0]


def test_end_of_turn_token_is_im_end(tiny_tok):
    assert end_of_turn_token(tiny_tok) == "<|im_end|>"


@pytest.mark.parametrize("version", VERSIONS)
def test_supervised_tokens_are_exactly_answer_plus_end_of_turn(tiny_tok, version):
    samples = synthetic_samples("train", per_subset=2)
    builder = ExampleBuilder(tiny_tok, version, enable_thinking=False, max_seq_length=4096)
    examples, stats = builder.build_all(samples)
    assert stats.n == len(samples) == len(examples)
    for s, ex in zip(samples, examples):
        want = answer_text(s, version) + "<|im_end|>"
        assert supervised_text(tiny_tok, ex) == want
        n_sup = sum(t != IGNORE_INDEX for t in ex.labels)
        assert ex.labels[-n_sup:] == ex.input_ids[-n_sup:]
        assert all(t == IGNORE_INDEX for t in ex.labels[:-n_sup])
        assert ex.input_ids[-1] == tiny_tok.convert_tokens_to_ids("<|im_end|>")
    if version == "direct_v1":
        assert {supervised_text(tiny_tok, e) for e in examples} == {"yes<|im_end|>", "no<|im_end|>"}
    else:
        assert supervised_text(tiny_tok, examples[0]).startswith('{"misbehavior": true')
    verify_examples(tiny_tok, examples, "<|im_end|>", decode_first=len(examples))


@pytest.mark.parametrize("version", VERSIONS)
def test_training_prompt_is_byte_identical_to_evaluation_prompt(tiny_tok, version):
    """Evaluation renders prompt_text(tok, monitor_messages(sample, version), enable_thinking=False)."""
    builder = ExampleBuilder(tiny_tok, version, enable_thinking=False, max_seq_length=4096)
    for s in synthetic_samples("test", per_subset=2):
        ex = builder.build(s)
        eval_prompt = prompt_text(tiny_tok, monitor_messages(s, version), enable_thinking=False)
        assert ex.prompt == eval_prompt
        n_prompt = sum(t == IGNORE_INDEX for t in ex.labels)
        assert ex.input_ids[:n_prompt] == tiny_tok(eval_prompt, add_special_tokens=False)["input_ids"]
        assert tiny_tok.decode(ex.input_ids[:n_prompt]) == eval_prompt
        # thinking off: the prompt ends with the empty think block, so the answer is the first token
        assert eval_prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_long_responses_are_shortened_in_the_middle_never_dropped(tiny_tok):
    samples = synthetic_samples("train", per_subset=4, long_every=3, long_words=2500)
    long_ids = {s.id for s in samples if "End of the response." in s.response}
    assert long_ids
    limit = 1100
    budget = prompt_budget("evidence_v1", limit)  # 512 of the limit are the answer's
    builder = ExampleBuilder(tiny_tok, "evidence_v1", enable_thinking=False, max_seq_length=limit)
    examples, stats = builder.build_all(samples)
    assert len(examples) == len(samples)                      # nothing dropped
    assert stats.responses_shortened == len(long_ids)         # counted
    assert stats.summary()["samples_shortened"] == len(long_ids)
    for s, ex in zip(samples, examples):
        n_prompt = sum(t == IGNORE_INDEX for t in ex.labels)
        assert n_prompt <= budget and len(ex.input_ids) <= limit
        assert supervised_text(tiny_tok, ex) == answer_text(s, "evidence_v1") + "<|im_end|>"  # answer intact
        if s.id in long_ids:
            assert ex.response_tokens_removed > 0
            assert MARKER_HEAD in ex.prompt
            head = s.response.split("\n")[0]
            assert head in ex.prompt and "End of the response." in ex.prompt   # head and tail kept
            assert s.request in ex.prompt                                      # request untouched
            assert n_prompt >= budget - 8                                      # budget used, not wasted
        else:
            assert ex.response_tokens_removed == 0 and MARKER_HEAD not in ex.prompt


def test_shortened_prompt_is_what_evaluation_renders_for_the_shortened_response(tiny_tok):
    s = synthetic_samples("train", per_subset=3, long_every=1, long_words=2000)[0]
    builder = ExampleBuilder(tiny_tok, "direct_v1", enable_thinking=False, max_seq_length=400)
    ex = builder.build(s)
    resp = ex.prompt.split("Assistant response:\n<<<\n", 1)[1].split("\n>>>\n\n", 1)[0]
    assert ex.prompt == prompt_text(tiny_tok, monitor_messages(s, "direct_v1", response=resp), enable_thinking=False)


def test_over_long_request_is_shortened_too_and_counted(tiny_tok):
    s = synthetic_samples("train", per_subset=1)[0]
    s = dataclasses.replace(s, request="please " * 3000, response=s.response + " filler" * 3000)
    builder = ExampleBuilder(tiny_tok, "direct_v1", enable_thinking=False, max_seq_length=512)
    examples, stats = builder.build_all([s])
    ex = examples[0]
    assert len(ex.input_ids) <= 512 and ex.request_tokens_removed > 0 and ex.response_tokens_removed > 0
    assert stats.requests_shortened == 1 and stats.responses_shortened == 1
    assert supervised_text(tiny_tok, ex) == "yes<|im_end|>"


@pytest.mark.parametrize("prompt,limit,why", [
    ("direct_v1", 200, "needs [0-9]+ tokens for the direct_v1 template alone"),
    ("evidence_v1", 400, "the evidence_v1 prompt reserves 512 tokens for its answer"),
])
def test_max_seq_length_too_small_for_the_template_is_a_clear_error(tiny_tok, prompt, limit, why):
    s = synthetic_samples("train", per_subset=1)[0]
    s = dataclasses.replace(s, response=s.response + " filler" * 500)
    builder = ExampleBuilder(tiny_tok, prompt, enable_thinking=False, max_seq_length=limit)
    with pytest.raises(TrainConfigError, match=f"train.max_seq_length={limit} is too small: .*{why}"):
        builder.build(s)


def test_answer_longer_than_the_prompts_answer_reserve_is_a_clear_error(tiny_tok):
    """Prompts get max_seq_length - answer_reserve; an answer beyond the reserve could overrun the limit."""
    s = next(x for x in synthetic_samples("train", per_subset=1) if x.label == 1)
    # Three quotes of 400 rare characters (several tokens each): far more than the 512-token reserve.
    s = dataclasses.replace(s, evidence=["\U0001f99c\u0b8a" * 200] * 3)
    builder = ExampleBuilder(tiny_tok, "evidence_v1", enable_thinking=False, max_seq_length=4096)
    with pytest.raises(TrainConfigError, match="more than the 512 tokens the prompt reserves for its answer"):
        builder.build(s)
    assert builder.build(dataclasses.replace(s, evidence=[s.evidence[0][:20]])).answer  # a short quote fits


def test_select_samples_filters_subsets_and_rejects_unknown():
    samples = synthetic_samples("train", per_subset=2)
    got = select_samples(samples, ["safety_qa", "sg_code"])
    assert {s.subset for s in got} == {"safety_qa", "sg_code"} and len(got) == 4
    with pytest.raises(TrainConfigError, match="valid: safety_qa"):
        select_samples(samples, ["nope"])


def test_trl_keeps_every_example_and_label_untouched(tiny_model_path, tiny_tok):
    """SFTTrainer must not truncate, re-mask or drop our pre-tokenised examples (apis.md s2c)."""
    from transformers import AutoModelForCausalLM
    from trl import SFTTrainer

    from automon.config.train import SFTConfig
    from automon.training.sft_args import make_sft_args
    from automon.training.trainers import SeededLengthGroupedSampler, make_trainer_class

    samples = synthetic_samples("train", per_subset=2, long_every=2, long_words=1500)
    builder = ExampleBuilder(tiny_tok, "direct_v1", False, 512)
    examples, _ = builder.build_all(samples)
    dataset, stats, first = builder.build_dataset(samples, batch=5)   # what run() trains on, in chunks
    assert stats.n == len(samples) and stats.responses_shortened == len(samples) // 2
    assert first.sample_id == samples[0].id and dataset["length"] == [len(e.input_ids) for e in examples]
    cfg = SFTConfig()
    cfg.train.packing = False  # the examples as TRL gets them unpacked (packed rows: tests/training/test_packing.py)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        args = make_sft_args(cfg, Path(d), on_cuda=False, report_to=[])
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        tr = make_trainer_class(SFTTrainer, label_only_loss=True)(
            model=model, args=args, train_dataset=dataset, processing_class=tiny_tok)
        ds = tr.train_dataset
        assert len(ds) == len(examples)
        assert ds["labels"] == [e.labels for e in examples]
        assert ds["input_ids"] == [e.input_ids for e in examples]
        # batches of similar length, in an order that depends only on (seed, epoch): exact resume
        sampler = tr._get_train_sampler()
        assert isinstance(sampler, SeededLengthGroupedSampler)
        first = list(sampler)
        assert sorted(first) == list(range(len(examples))) and list(sampler) == first
        sampler.set_epoch(1)
        assert list(sampler) != first


def test_label_position_loss_equals_the_standard_causal_lm_loss(tiny_model_path, tiny_tok):
    """The CPU loss (LM head on label positions only) is the model's own loss on the same labels."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from automon.training.trainers import label_position_loss

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    for p in model.parameters():  # make the logits non-uniform so the comparison means something
        p.data.add_(torch.randn_like(p) * 0.05)
    samples = synthetic_samples("train", per_subset=1)
    examples, _ = ExampleBuilder(tiny_tok, "evidence_v1", False, 4096).build_all(samples)
    batch = DataCollatorForLanguageModeling(pad_token_id=tiny_tok.pad_token_id)(
        [{"input_ids": e.input_ids, "labels": e.labels} for e in examples])
    with torch.no_grad():
        ref = model(**batch).loss
        ours, _ = label_position_loss(model, dict(batch))
        n = (batch["labels"][:, 1:] != -100).sum()
        ours_n, _ = label_position_loss(model, dict(batch), num_items_in_batch=n * 2)
    assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-5), (ours, ref)
    assert torch.allclose(ours_n, ref / 2, rtol=1e-5, atol=1e-5)
