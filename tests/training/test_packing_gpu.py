"""On a CUDA GPU, through each trainer plug-in's own model and loss (Unsloth's attention reads
packed_seq_lengths, not the position ids): an example's loss inside a pack equals its loss alone (bf16),
and changing another example of the pack leaves it unchanged (no attention across examples).

Skipped without CUDA (and the unsloth case without the unsloth package): the CPU suite covers the peft
trainer in fp32 (test_packing_model.py); this is the check of the GPU kernels.
"""

from __future__ import annotations

import pytest
from support import has_cuda, synthetic_samples

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")]


def _trainer(name: str, tmp_path, tiny_model_path):
    from omegaconf import OmegaConf

    from automon.training.data import ExampleBuilder
    from automon.training.sft_args import make_sft_args
    from automon.training.trainers import get_trainer
    from test_packing import _cfg

    plugin = get_trainer(name)
    plugin.prepare()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    cfg = OmegaConf.to_object(_cfg("model=tiny", f"trainer={name}", "model.dtype=bfloat16", "train.lora.r=8",
                                   "train.lora.alpha=16", "train.max_steps=1", "train.max_seq_length=1024"))
    cfg.train.grad_accum = cfg.train.accumulation()
    ds, _, _ = ExampleBuilder(tok, "direct_v1", False, 1024).build_dataset(synthetic_samples("train", per_subset=2))
    trainer = plugin.build(cfg, str(tiny_model_path), tok, ds, make_sft_args(cfg, tmp_path, True, []), [], 1024)
    return trainer


def _loss_of(model, batch: dict, keep: slice) -> float:
    """The model's own loss on the label tokens inside `keep` (all others set to -100)."""
    import torch

    labels = torch.full_like(batch["labels"], -100)
    labels[:, keep] = batch["labels"][:, keep]
    with torch.no_grad():
        return float(model(**{**batch, "labels": labels}).loss)


@pytest.mark.parametrize("name", ["peft", "unsloth"])
def test_packed_examples_keep_to_themselves_on_the_gpu(name, tmp_path, tiny_model_path):
    import torch

    if name == "unsloth":
        pytest.importorskip("unsloth", reason="trainer=unsloth needs the unsloth package ([gpu-train] extra)")
    trainer = _trainer(name, tmp_path, tiny_model_path)
    model = trainer.model
    row = max(trainer.train_dataset.to_list(), key=lambda r: len(r["seq_lengths"]))
    assert len(row["seq_lengths"]) >= 3
    dev = next(model.parameters()).device
    cuda = lambda b: {k: v.to(dev) for k, v in b.items()}  # noqa: E731
    packed = cuda(trainer.data_collator([row]))
    bounds, start = [], 0
    for n in row["seq_lengths"]:
        bounds.append((start, start + n))
        start += n
    for a, b in bounds:
        alone = cuda({"input_ids": packed["input_ids"][:, a:b].cpu(), "labels": packed["labels"][:, a:b].cpu()})
        got, want = _loss_of(model, packed, slice(a, b)), _loss_of(model, alone, slice(0, b - a))
        assert abs(got - want) <= 0.02 * max(1.0, abs(want)), (name, a, got, want)

    a, b = bounds[1]
    changed = {k: v.clone() for k, v in packed.items()}
    changed["input_ids"][:, a:b - 2] = torch.randint(100, 5000, (1, b - 2 - a), device=dev)
    for j, (x, y) in enumerate(bounds):
        if j != 1:
            before, after = _loss_of(model, packed, slice(x, y)), _loss_of(model, changed, slice(x, y))
            assert abs(before - after) <= 1e-3 * max(1.0, abs(before)), (name, j, before, after)
