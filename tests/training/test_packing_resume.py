"""Packed training is deterministic by seed, and a run resumed from a checkpoint continues with the same
next example as the uninterrupted run, across an epoch boundary, to bit-identical LoRA weights (CPU).
(End to end through train/sft.py with SIGTERM: tests/training/test_train_run.py, packed by default.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import synthetic_samples

torch = pytest.importorskip("torch")

from automon.training.data import ExampleBuilder  # noqa: E402
from automon.training.packing import pack_dataset  # noqa: E402

GA = 2  # packs per optimizer step


class Recorder:
    """Wraps the trainer's collator: the packs (by their tokens) in the order the trainer trains them."""

    def __init__(self, collate) -> None:
        self.collate, self.seen = collate, []

    def __call__(self, features):
        self.seen.extend(tuple(f["input_ids"]) for f in features)
        return self.collate(features)


def _trainer(out: Path, ds, tok, model_path: str, max_steps: int, save_steps: int, seed: int = 0):
    from omegaconf import OmegaConf

    from automon.training.sft_args import make_sft_args
    from automon.training.trainers import get_trainer
    from test_packing import _cfg

    cfg = OmegaConf.to_object(_cfg("model=tiny", "trainer=peft", "train.lr=5e-3", "train.lora.r=8",
                                   "train.lora.alpha=16", "train.warmup_ratio=0", f"train.max_steps={max_steps}",
                                   "train.max_seq_length=1024", f"train.grad_accum={GA}",
                                   f"train.save_steps={save_steps}", "train.logging_steps=1", f"train.seed={seed}"))
    args = make_sft_args(cfg, out, on_cuda=False, report_to=[])
    args.save_total_limit = None                          # keep the checkpoint the test resumes from
    trainer = get_trainer("peft").build(cfg, model_path, tok, ds, args, [], 1024)
    trainer.data_collator = Recorder(trainer.data_collator)
    return trainer


def _lora(trainer) -> dict:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}


def test_resumed_packed_run_continues_with_the_same_next_example(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    ds, _, _ = ExampleBuilder(tok, "direct_v1", False, 1024).build_dataset(synthetic_samples("train", per_subset=4))
    packs, _ = pack_dataset(ds, 1024, seed=0)
    example_of = {tuple(r["input_ids"]): list(r["example_index"]) for r in packs}
    per_epoch = -(-len(packs) // GA)
    assert per_epoch >= 3
    stop, total = per_epoch - 1, per_epoch + 2            # the resumed segment crosses into epoch 2

    a = _trainer(tmp_path / "A", ds, tok, str(tiny_model_path), total, stop)
    a.train()
    order_a = [i for p in a.data_collator.seen for i in example_of[p]]
    assert sorted(order_a[:len(ds)]) == list(range(len(ds)))   # epoch 1 trains every example once

    (tmp_path / "B" / "checkpoints").mkdir(parents=True)
    ckpt = tmp_path / "B" / "checkpoints" / f"checkpoint-{stop}"
    shutil.copytree(tmp_path / "A" / "checkpoints" / f"checkpoint-{stop}", ckpt)
    b = _trainer(tmp_path / "B", ds, tok, str(tiny_model_path), total, stop)
    b.train(resume_from_checkpoint=str(ckpt))
    order_b = [i for p in b.data_collator.seen for i in example_of[p]]
    done = sum(len(example_of[p]) for p in a.data_collator.seen[:stop * GA])
    assert order_b and order_b == order_a[done:]          # the same next example, and the same ones after it

    wa, wb = _lora(a), _lora(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    loss = lambda t: [(h["step"], h["loss"]) for h in t.state.log_history if "loss" in h]  # noqa: E731
    assert loss(b)[-2:] == loss(a)[-2:]

    c = _trainer(tmp_path / "C", ds, tok, str(tiny_model_path), 2, 1000, seed=1)
    c.train()                                             # another seed: other packs order
    assert c.data_collator.seen[:2 * GA] != a.data_collator.seen[:2 * GA]
