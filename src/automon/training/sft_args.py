"""The single translation of automon's `train.*` / `trainer.*` config into TRL's SFTConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def gradient_checkpointing(cfg: Any, on_cuda: bool) -> bool:
    gc = cfg.trainer.gradient_checkpointing
    return on_cuda if gc is None else bool(gc)


def tokens_per_step(cfg: Any, max_seq_length: int) -> int:
    """The token budget of a packed micro-batch: train.tokens_per_step, or the (clamped) max_seq_length."""
    return cfg.train.tokens_per_step or max_seq_length


def make_sft_args(cfg: Any, run_dir: Path, on_cuda: bool, report_to: list[str]):
    """TRL SFTConfig for a run. The dataset arrives tokenised with labels, so TRL must not
    truncate (max_length=None: it would cut the answer, then drop the example) nor pack: with
    train.packing automon packs itself (automon.training.packing, whole examples only) and a
    micro-batch is one pack, so the per-device batch is 1."""
    from trl import SFTConfig as TRLSFTConfig

    t = cfg.train
    packed = t.packing
    bf16 = on_cuda and cfg.model.dtype in ("bfloat16", "auto")
    fp16 = on_cuda and cfg.model.dtype == "float16"
    return TRLSFTConfig(
        output_dir=str(run_dir / "checkpoints"),
        run_name=run_dir.name,
        per_device_train_batch_size=1 if packed else t.batch_size,
        gradient_accumulation_steps=t.accumulation(),
        learning_rate=t.lr,
        num_train_epochs=t.epochs,
        max_steps=t.max_steps,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_ratio,  # a float < 1 is a ratio of the total steps (transformers 5)
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        seed=t.seed,
        data_seed=t.seed,
        logging_steps=t.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        bf16=bf16,
        fp16=fp16,
        use_cpu=not on_cuda,
        gradient_checkpointing=gradient_checkpointing(cfg, on_cuda),
        # packed: the trainer visits packs in an order drawn from (seed, epoch) (trainers.make_trainer_class)
        train_sampling_strategy="group_by_length" if t.group_by_length and not packed else "random",
        include_num_input_tokens_seen="non_padding",
        report_to=report_to,
        max_length=None,
        packing=False,
        padding_free=False,
        completion_only_loss=None,
        assistant_only_loss=False,
        dataset_num_proc=None,
        dataloader_num_workers=0,
        remove_unused_columns=True,
        disable_tqdm=True,
        save_only_model=False,
    )
