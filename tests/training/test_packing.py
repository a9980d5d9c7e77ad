"""Packing (automon.training.packing): the plan, the packed rows and their loss-mask check, the collator,
the pack order, and what train.packing does to a run's identity. Model-level checks (loss, gradients,
no leakage, adapters) are in test_packing_model.py; resume in test_packing_resume.py."""

from __future__ import annotations

import json
import random

import pytest
from support import REPO, synthetic_samples
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from automon.config.train import register
from automon.training.data import ExampleBuilder, end_of_turn_token
from automon.training.packing import (
    PackCollator,
    pack_dataset,
    pack_stats,
    plan_packs,
    position_ids,
    split_pack,
    verify_packs,
)

register()


def _lengths(n: int = 300, seed: int = 0) -> list[int]:
    """A long-tailed mix like the corpus's: mostly a few hundred tokens, a few long ones."""
    r = random.Random(seed)
    return [int(min(4000, 40 + r.lognormvariate(5.5, 0.6))) for _ in range(n)] + [5000, 4500]


def test_plan_puts_every_example_in_one_pack_within_the_budget():
    lengths, budget = _lengths(), 2048
    packs = plan_packs(lengths, budget, seed=0)
    assert sorted(i for p in packs for i in p) == list(range(len(lengths)))
    for p in packs:
        size = sum(lengths[i] for i in p)
        assert size <= budget or len(p) == 1          # an example over the budget trains alone, uncut
    alone = [p for p in packs if sum(lengths[i] for i in p) > budget]
    assert sorted(lengths[p[0]] for p in alone) == [4500, 5000]
    st = pack_stats(lengths, packs, budget)
    assert st.computed_tokens == st.useful_tokens == sum(lengths)   # padding-free: nothing else is computed
    assert st.fill >= 0.95 and st.over_budget == 2


def test_plan_is_a_function_of_the_seed():
    lengths = _lengths()
    assert plan_packs(lengths, 2048, seed=3) == plan_packs(list(lengths), 2048, seed=3)
    assert plan_packs(lengths, 2048, seed=3) != plan_packs(lengths, 2048, seed=4)


def _examples(tok, prompt="direct_v1", per_subset=4, max_len=1024):
    samples = synthetic_samples("train", per_subset=per_subset, long_every=5, long_words=800)
    builder = ExampleBuilder(tok, prompt, enable_thinking=False, max_seq_length=max_len)
    objs, _ = builder.build_all(samples)
    ds, _, _ = builder.build_dataset(samples)
    return objs, ds


@pytest.mark.parametrize("prompt", ["direct_v1", "evidence_v1"])
def test_loss_mask_check_decodes_the_packed_rows(tiny_tok, prompt):
    """Cut out of the pack rows by seq_lengths, every example's supervised tokens decode to its answer +
    end of turn (the decode check run on every pack here, on the first 16 examples in a run)."""
    objs, ds = _examples(tiny_tok, prompt)
    packs, st = pack_dataset(ds, 1024, seed=0)
    assert st.packs < st.examples                   # several examples share a pack
    eot = end_of_turn_token(tiny_tok)
    verify_packs(tiny_tok, packs, ds, eot, answers=[e.answer for e in objs], decode_first=len(objs))
    for row in packs:                               # the same, spelt out
        for (ids, labels), i in zip(split_pack(row), row["example_index"]):
            assert ids == objs[i].input_ids and labels == objs[i].labels
            sup = [t for t in labels if t != -100]
            assert tiny_tok.decode(sup) == objs[i].answer + eot


def test_loss_mask_check_catches_a_shifted_boundary_and_a_lost_example(tiny_tok):
    from datasets import Dataset

    objs, ds = _examples(tiny_tok)
    packs, _ = pack_dataset(ds, 1024, seed=0)
    eot = end_of_turn_token(tiny_tok)
    rows = packs.to_list()
    k = next(n for n, r in enumerate(rows) if len(r["seq_lengths"]) > 1)
    shifted = [dict(r) for r in rows]
    shifted[k]["seq_lengths"] = [shifted[k]["seq_lengths"][0] + 1, shifted[k]["seq_lengths"][1] - 1,
                                 *shifted[k]["seq_lengths"][2:]]
    with pytest.raises(AssertionError, match="seq_lengths"):
        verify_packs(tiny_tok, Dataset.from_list(shifted), ds, eot)
    with pytest.raises(AssertionError, match="exactly once"):
        verify_packs(tiny_tok, Dataset.from_list(rows[:-1]), ds, eot)
    wrong = [dict(r) for r in rows]
    wrong[k]["labels"] = [-100] + wrong[k]["labels"][:-1]   # labels one token late
    with pytest.raises(AssertionError, match="labels"):
        verify_packs(tiny_tok, Dataset.from_list(wrong), ds, eot)
    answers = [e.answer for e in objs]
    answers[rows[0]["example_index"][0]] = "maybe"
    with pytest.raises(AssertionError, match="decode"):
        verify_packs(tiny_tok, packs, ds, eot, answers=answers)


def test_collator_restarts_positions_per_example_and_sends_no_attention_mask():
    row = {"input_ids": list(range(10, 19)), "labels": [-100] * 3 + [13, 14] + [-100] * 2 + [17, 18],
           "seq_lengths": [5, 4]}
    b = PackCollator()([row])
    assert set(b) == {"input_ids", "labels", "position_ids"}    # no attention_mask: the mask comes from positions
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]] == [position_ids([5, 4])]
    assert b["input_ids"].tolist() == [row["input_ids"]] and b["labels"].tolist() == [row["labels"]]
    u = PackCollator(with_seq_lengths=True)([row])
    assert u["packed_seq_lengths"].tolist() == [5, 4] and str(u["packed_seq_lengths"].dtype) == "torch.int32"
    with pytest.raises(ValueError, match="one pack"):
        PackCollator()([row, row])


def test_pack_order_depends_only_on_seed_and_epoch():
    from automon.training.trainers import SeededShuffleSampler

    a, b = SeededShuffleSampler(50, seed=1), SeededShuffleSampler(50, seed=1)
    a.set_epoch(2), b.set_epoch(2)
    assert list(a) == list(b) and sorted(a) == list(range(50))
    b.set_epoch(3)
    assert list(a) != list(b)


# ------------------------------------------------------------------ config and identity

def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="sft", overrides=list(overrides))


def test_defaults_pack_with_one_micro_batch_per_step_and_unpacked_keeps_2_x_8(small_build):
    from automon.training.identity import resolve

    r = resolve(_cfg(f"data.dir={small_build}"))
    assert r.cfg.train.packing and r.resolved["train"]["grad_accum"] == 1
    # null budget: the device's default, recorded as the number trained with (CPU here: 4096 of 32k)
    assert r.cfg.train.tokens_per_step == r.resolved["train"]["tokens_per_step"] == 4096
    r = resolve(_cfg(f"data.dir={small_build}", "train.packing=false"))
    assert (r.cfg.train.batch_size, r.resolved["train"]["grad_accum"]) == (2, 8)
    r = resolve(_cfg(f"data.dir={small_build}", "train.grad_accum=4"))
    assert r.resolved["train"]["grad_accum"] == 4


def test_tokens_per_step_below_256_is_refused(small_build):
    from automon.training.errors import TrainConfigError
    from automon.training.identity import resolve

    with pytest.raises(TrainConfigError, match="train.tokens_per_step"):
        resolve(_cfg(f"data.dir={small_build}", "train.tokens_per_step=100"))


def test_a_run_from_before_packing_is_the_unpacked_run_not_the_packed_default(small_build, tmp_path):
    """A changed default changes numbers: the packed default does not take an older (unpacked) run for
    its own, and train.packing=false does."""
    from automon.stage_status import Currency
    from automon.training.identity import resolve, run_status

    run = tmp_path / "run"
    old = resolve(_cfg(f"data.dir={small_build}", f"output_dir={run}", "train.packing=false"))
    recorded = json.loads(json.dumps(old.resolved))
    del recorded["train"]["packing"], recorded["train"]["tokens_per_step"]   # what a run before packing wrote
    run.mkdir()
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(recorded)))
    (run / "run.json").write_text(json.dumps({"status": "running", "subsets": old.subsets,
                                              "data_manifest_hash": old.build.manifest_hash}))
    assert run_status(old).state is Currency.RESUMABLE
    packed = run_status(resolve(_cfg(f"data.dir={small_build}", f"output_dir={run}")))
    assert packed.state is Currency.STALE and "train.packing: '<absent>' -> True" in packed.reason
    assert "train.grad_accum: 8 -> 1" in packed.reason


@pytest.mark.slow  # two train/sft.py runs
def test_a_run_records_how_it_batched(small_build, tmp_path):
    """train/sft.py end to end: run.json, train_metrics.json, the adapter's metadata and card say packed (with
    the packing version and budget) or not."""
    from support import run_sft, tiny_overrides

    from automon.adapter_meta import AdapterMeta
    from automon.training.packing import PACKING_VERSION

    for packing in ("true", "false"):
        run = tmp_path / packing
        r = run_sft(*tiny_overrides(small_build, run, "subset=all", "train.max_steps=2", f"train.packing={packing}"))
        assert r.returncode == 0, r.stderr[-3000:]
        info = json.loads((run / "run.json").read_text())
        card = (run / "adapter" / "README.md").read_text()
        meta = AdapterMeta.read(run / "adapter")
        if packing == "true":
            p = info["packing"]
            assert p["packing"] == PACKING_VERSION and p["tokens_per_step"] == 1024 and p["examples"] == 48
            assert p["packs"] < 48 and p["computed_tokens"] == p["useful_tokens"]
            assert "packed: micro-batches of up to 1024 tokens" in card and "packed" in r.stderr
        else:
            assert info["packing"] is None and "batch 4 x grad accum 2" in card
        assert json.loads((run / "train_metrics.json").read_text())["packing"] == info["packing"]
        assert meta.extra["packing"] == info["packing"]


def test_a_long_pack_on_cpu_is_warned_about(caplog):
    """On CPU a pack of the default budget (32k tokens) can fill the machine (activations without gradient
    checkpointing, attention across the whole pack): said before the first step, naming the knob; not as
    logits, which the loss computes on the answer tokens only; a 1k pack is not worth a word."""
    import logging

    from automon.training.trainers import _warn_cpu_pack

    with caplog.at_level(logging.WARNING, logger="automon.training"):
        _warn_cpu_pack(1024)
        assert not caplog.records
        _warn_cpu_pack(32768)
    assert "32768 tokens" in caplog.text and "train.tokens_per_step" in caplog.text
    assert "logits" not in caplog.text


# ------------------------------------------------------------------ the unsloth plug-in, without a GPU

def _fake_unsloth(calls: dict):
    """A stand-in `unsloth` module: FastLanguageModel loads the tiny model with transformers and adds LoRA with
    PEFT, recording what the plug-in asked for (Unsloth itself needs CUDA; its kernels are test_packing_gpu.py's)."""
    import types

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(model_name, max_seq_length, **kw):
            import torch
            from transformers import AutoModelForCausalLM

            calls["max_seq_length"] = max_seq_length
            return AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float32), None

        @staticmethod
        def get_peft_model(model, r, lora_alpha, lora_dropout, target_modules, bias, **kw):
            from peft import LoraConfig, get_peft_model

            return get_peft_model(model, LoraConfig(r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                                                    target_modules=target_modules, bias=bias, task_type="CAUSAL_LM"))

    mod = types.ModuleType("unsloth")
    mod.FastLanguageModel = FastLanguageModel
    return mod


@pytest.mark.parametrize("packing", [True, False])
def test_the_unsloth_plugin_packs_and_sends_packed_seq_lengths(packing, tiny_tok, tiny_model_path, tmp_path,
                                                              monkeypatch):
    """trainer=unsloth packs by default as trainer=peft does: its trainer trains on the packs, in the seeded pack
    order, and its collator adds packed_seq_lengths (what Unsloth's attention reads to keep examples apart) to
    the restarting position ids; Unsloth is loaded for the longest pack. train.packing=false leaves the examples
    to TRL's padding collator, as before packing."""
    import sys

    from automon.training.packing import IGNORE_INDEX
    from automon.training.sft_args import make_sft_args
    from automon.training.trainers import SeededShuffleSampler, get_trainer

    calls: dict = {}
    monkeypatch.setitem(sys.modules, "unsloth", _fake_unsloth(calls))
    cfg = OmegaConf.to_object(_cfg("model=tiny", "trainer=unsloth", "train.lora.r=8", "train.lora.alpha=16",
                                   "train.max_steps=1", "train.max_seq_length=1024", "train.tokens_per_step=2048",
                                   f"train.packing={str(packing).lower()}"))
    cfg.train.grad_accum = cfg.train.accumulation()
    _, ds = _examples(tiny_tok)
    args = make_sft_args(cfg, tmp_path, on_cuda=False, report_to=[])
    trainer = get_trainer("unsloth").build(cfg, str(tiny_model_path), tiny_tok, ds, args, [], 1024)
    assert trainer.args.gradient_checkpointing is False            # Unsloth checkpoints itself
    if not packing:
        assert calls["max_seq_length"] == 1024 and trainer.automon_packing is None
        assert "seq_lengths" not in trainer.train_dataset.column_names and trainer.args.per_device_train_batch_size == 2
        return
    assert calls["max_seq_length"] == 2048                         # a pack may be longer than max_seq_length
    summary = trainer.automon_packing
    assert summary["examples"] == len(ds) and summary["packs"] < len(ds) and summary["tokens_per_step"] == 2048
    assert trainer.args.per_device_train_batch_size == 1 and trainer.args.gradient_accumulation_steps == 1
    assert isinstance(trainer._get_train_sampler(), SeededShuffleSampler)
    row = max(trainer.train_dataset.to_list(), key=lambda r: len(r["seq_lengths"]))
    assert len(row["seq_lengths"]) > 1
    b = trainer.data_collator([row])
    assert "attention_mask" not in b
    assert b["packed_seq_lengths"].tolist() == row["seq_lengths"] and str(b["packed_seq_lengths"].dtype) == "torch.int32"
    assert b["position_ids"].tolist() == [position_ids(row["seq_lengths"])]
    starts = [sum(row["seq_lengths"][:k]) for k in range(len(row["seq_lengths"]))]
    assert all(b["labels"][0, s].item() == IGNORE_INDEX for s in starts)   # no position predicts across a boundary
