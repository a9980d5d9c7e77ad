"""The single translation of automon's `train.*` / `trainer.*` config into TRL's SFTConfig, and the
device-dependent values behind the config's `null` / `auto`: the pack budget and gradient checkpointing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from automon.config.train import CPU_TOKENS_PER_STEP, checkpointing_choice, token_budget

# Gradient checkpointing recomputes each layer's forward in the backward pass (about a third more compute) to
# keep only the layer inputs; `auto` turns it off where a recorded GPU run WITHOUT it fitted. Entries:
# (trainer, model name) -> the largest tokens per micro-batch at which bench/bench_train_gpu.py --corpus
# --grad-ckpt off peaked within NO_CHECKPOINTING_PEAK_GIB, with the record it comes from beside it. Empty:
# no such run has been recorded yet (bench/gpu_round.py measures it), so on a GPU `auto` is on, as before.
NO_CHECKPOINTING_FITS: dict[tuple[str, str], int] = {}
NO_CHECKPOINTING_PEAK_GIB = 27.9   # 30 GB: the bound training's defaults keep to on an 80 GB H100
# A card with less memory than the bound plus headroom (allocator reserve, CUDA context) keeps checkpointing.
NO_CHECKPOINTING_MIN_CARD_GIB = 36.0


def default_tokens_per_step(max_seq_length: int, on_cuda: bool) -> int:
    """train.tokens_per_step=null: max_seq_length on a CUDA GPU; on CPU CPU_TOKENS_PER_STEP, at most
    max_seq_length (a pack then never needs more than the longest example would alone)."""
    return max_seq_length if on_cuda else min(CPU_TOKENS_PER_STEP, max_seq_length)


def tokens_per_step(cfg: Any, max_seq_length: int, on_cuda: bool | None = None) -> int:
    """The token budget of a packed micro-batch: train.tokens_per_step (run.resolve has made null a number
    already), or for a config that did not go through it the device's default."""
    budget = token_budget(cfg.train.tokens_per_step)
    if budget is not None:
        return budget
    if on_cuda is None:
        import torch  # heavy: asked only of a config that did not go through run.resolve (benchmarks, tests)

        on_cuda = torch.cuda.is_available()
    return default_tokens_per_step(max_seq_length, on_cuda)


def micro_batch_tokens(cfg: Any, max_seq_length: int, on_cuda: bool) -> int:
    """The most tokens one forward/backward holds: the pack budget, or batch_size x max_seq_length unpacked."""
    if cfg.train.packing:
        return tokens_per_step(cfg, max_seq_length, on_cuda)
    return cfg.train.batch_size * max_seq_length


def _card_gib() -> float:
    import torch

    return torch.cuda.get_device_properties(0).total_memory / 2**30


def gradient_checkpointing(cfg: Any, on_cuda: bool, trainer: str | None = None, max_seq_length: int | None = None,
                           card_gib: float | None = None) -> bool:
    """trainer.gradient_checkpointing resolved: true / false as given; auto (or null) off on CPU (memory is not
    the bound there: a step's activations fit), and on a CUDA GPU off only when NO_CHECKPOINTING_FITS has a
    recorded bound for (trainer, model) at or above this run's tokens per micro-batch and the card has
    NO_CHECKPOINTING_MIN_CARD_GIB; on otherwise."""
    choice = checkpointing_choice(cfg.trainer.gradient_checkpointing)
    if choice != "auto":
        return choice == "true"
    if not on_cuda:
        return False
    bound = NO_CHECKPOINTING_FITS.get((trainer or cfg.trainer.name, cfg.model.name))
    if bound is None:
        return True
    tokens = micro_batch_tokens(cfg, max_seq_length or min(cfg.train.max_seq_length, cfg.model.max_position_embeddings),
                                on_cuda)
    fits = tokens <= bound and (card_gib if card_gib is not None else _card_gib()) >= NO_CHECKPOINTING_MIN_CARD_GIB
    return not fits


def make_sft_args(cfg: Any, run_dir: Path, on_cuda: bool, report_to: list[str], trainer: str | None = None):
    """TRL SFTConfig for a run. The dataset arrives tokenised with labels, so TRL must not
    truncate (max_length=None: it would cut the answer, then drop the example) nor pack: with
    train.packing automon packs itself (automon.training.packing, whole examples only) and a
    micro-batch is one pack, so the per-device batch is 1. `trainer`: the plug-in's name when
    trainer.name is auto (gradient checkpointing's auto rule is per trainer)."""
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
        gradient_checkpointing=gradient_checkpointing(cfg, on_cuda, trainer),
        # peft trainer only (trainers.check_kernel_options refuses it elsewhere): RMSNorm, RoPE, SwiGLU kernels;
        # TRL keeps the LM head and loss its own (automon's label_position_loss here)
        use_liger_kernel=bool(getattr(cfg.trainer, "liger", False)),
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
