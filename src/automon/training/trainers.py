"""Trainer plug-ins, keyed by name: `peft` (transformers + TRL + PEFT, CPU and GPU) and `unsloth` (GPU).

Unsloth patches transformers/TRL/PEFT when imported and warns if it comes second, so `prepare()`
runs before anything imports transformers; it is the only place that imports unsloth. Nothing here
imports torch, transformers or unsloth at module import.

Loss. TRL 1.15's SFTTrainer routes the loss through a fused LM head whose kernel needs triton and a
GPU; on a CPU-only torch it fails at the first step (apis.md s2a). The `peft` trainer therefore
replaces `compute_loss` with `label_position_loss`: the backbone runs on every token, but the LM
head only on the positions whose next token carries a label (`logits_to_keep=<indices>`), then a
token-summed cross-entropy divided by the number of label tokens in the whole accumulated batch
(the same normalisation as transformers' `num_items_in_batch`). That is the standard causal-LM
loss on the answer tokens, and it also skips ~10% of the FLOPs and the 32k x 152k logits.
The `unsloth` trainer keeps Unsloth's own patched loss.

Batching. With train.packing (the default) both plug-ins train on packs (automon.training.packing):
one pack of whole examples per micro-batch, position ids restarting per example, no attention mask;
the `unsloth` collator adds `packed_seq_lengths`, which Unsloth's attention reads. The packs are
visited in an order drawn from (seed, epoch), like the length-grouped order of unpacked training, so
resuming continues with the same next example either way.

Verification status: the `peft` plug-in is exercised by the CPU tests. Both plug-ins ran on an H100
(Unsloth 2026.10.9, torch 2.11): `bench/bench_train_gpu.py` on Qwen3-4B shapes up to 2 x 32k tokens,
and `tests/training/test_train_gpu.py` (marked gpu: train, save, score the adapter on GPU and CPU).
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from automon.models.loading import ModelLoadError, _offline_hint
from automon.training.data import end_of_turn_token
from automon.training.errors import TrainConfigError
from automon.training.packing import PackCollator, pack_dataset, verify_packs
from automon.training.sft_args import tokens_per_step

log = logging.getLogger(__name__)

TRAINERS: dict[str, "TrainerPlugin"] = {}


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def unsloth_installed() -> bool:
    return importlib.util.find_spec("unsloth") is not None


def resolve_trainer_name(name: str) -> str:
    """`auto` -> unsloth with CUDA and the unsloth package, else peft."""
    if name == "auto":
        return "unsloth" if cuda_available() and unsloth_installed() else "peft"
    if name not in TRAINERS:
        raise TrainConfigError(f"unknown trainer {name!r}; valid: auto, {', '.join(TRAINERS)}")
    if name == "unsloth":
        if not cuda_available():
            raise TrainConfigError("trainer=unsloth needs a CUDA GPU; use trainer=peft (or trainer=auto) on CPU")
        if not unsloth_installed():
            raise TrainConfigError("trainer=unsloth needs the unsloth package: pip install -e '.[gpu-train]', "
                                   "or use trainer=peft")
    return name


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# trainer.attn_implementation -> the module it needs (flash-attn 2 / 3), beside CUDA
_ATTN_PACKAGES = {"flash_attention_2": ("flash_attn", "flash-attn"),
                  "flash_attention_3": ("flash_attn_interface", "flash-attn-3 (FlashAttention 3, Hopper)")}


def check_kernel_options(cfg, trainer: str, on_cuda: bool) -> None:
    """The kernel keys where they cannot apply, before the model loads: trainer.liger and a non-default
    trainer.attn_implementation are the peft trainer's (Unsloth has its own kernels); Liger, FlexAttention's
    backward and FlashAttention need a CUDA GPU, and Liger and FlashAttention their packages. One message each,
    naming the key and the fix."""
    t = cfg.trainer
    attn = t.attn_implementation
    if trainer != "peft":
        chosen = f"trainer={trainer}" + (" (trainer=auto chose it)" if t.name == "auto" else "")
        if t.liger:
            raise TrainConfigError(f"trainer.liger=true applies to the peft trainer; this run uses {chosen}, which "
                                   "has its own fused kernels", "trainer.liger",
                                   "pass trainer=peft to train with Liger's kernels, or trainer.liger=false")
        if attn != "sdpa":
            raise TrainConfigError(f"trainer.attn_implementation={attn} applies to the peft trainer; this run uses "
                                   f"{chosen}, which picks its own attention", "trainer.attn_implementation",
                                   "pass trainer=peft, or leave trainer.attn_implementation=sdpa")
        return
    if t.liger and not on_cuda:
        raise TrainConfigError("trainer.liger=true needs a CUDA GPU: Liger's kernels are Triton GPU kernels",
                               "trainer.liger", "set trainer.liger=false on CPU")
    if t.liger and not _installed("liger_kernel"):
        raise TrainConfigError("trainer.liger=true needs the liger-kernel package, which is not installed",
                               "trainer.liger", "pip install liger-kernel (bash scripts/gpu-wheels.sh fetches it for a "
                               "machine without internet), or set trainer.liger=false")
    if attn == "flex_attention" and not on_cuda:
        raise TrainConfigError("trainer.attn_implementation=flex_attention needs a CUDA GPU to train: torch's "
                               "FlexAttention has no backward pass on CPU", "trainer.attn_implementation",
                               "use trainer.attn_implementation=sdpa on CPU")
    if attn in _ATTN_PACKAGES:
        module, package = _ATTN_PACKAGES[attn]
        if not on_cuda:
            raise TrainConfigError(f"trainer.attn_implementation={attn} needs a CUDA GPU",
                                   "trainer.attn_implementation", "use trainer.attn_implementation=sdpa on CPU")
        if not _installed(module):
            raise TrainConfigError(f"trainer.attn_implementation={attn} needs the {package} package, which is not "
                                   "installed", "trainer.attn_implementation",
                                   f"install {package.split(' ')[0]}, or use trainer.attn_implementation=flex_attention "
                                   "(packs without a dense mask, built into torch) or sdpa")


def get_trainer(name: str) -> "TrainerPlugin":
    return TRAINERS[name]


# --------------------------------------------------------------------------------------------------
# Shared trainer behaviour: label-position loss, throughput in the logs.

def label_position_loss(model, inputs: dict, num_items_in_batch=None):
    """Causal-LM cross-entropy on label positions only; see the module docstring."""
    import torch
    import torch.nn.functional as F

    labels = inputs.pop("labels")
    target = labels[:, 1:]                       # the token predicted at position t is labels[t + 1]
    keep = (target != -100).any(dim=0).nonzero().squeeze(-1)
    inputs["use_cache"] = False
    out = model(**inputs, logits_to_keep=keep)
    logits = out.logits                           # (batch, len(keep), vocab)
    tgt = target[:, keep]
    loss_sum = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                               ignore_index=-100, reduction="sum")
    n = num_items_in_batch if num_items_in_batch is not None else (tgt != -100).sum()
    return loss_sum / torch.as_tensor(n, device=loss_sum.device).clamp(min=1), out


class Throughput:
    """Tokens seen and tokens/s between logging steps (non-padding input tokens)."""

    def __init__(self) -> None:
        self.t = None
        self.tokens = 0

    def start(self, tokens_seen: int) -> None:
        self.t, self.tokens = time.perf_counter(), int(tokens_seen)

    def update(self, tokens_seen: int) -> dict:
        now = time.perf_counter()
        if self.t is None:
            self.start(tokens_seen)
            return {"tokens_seen": int(tokens_seen)}
        dt = max(now - self.t, 1e-9)
        rate = (int(tokens_seen) - self.tokens) / dt
        self.t, self.tokens = now, int(tokens_seen)
        return {"tokens_seen": int(tokens_seen), "tokens_per_s": round(rate, 1)}


class SeededLengthGroupedSampler:
    """Length-grouped order (transformers' get_length_grouped_indices) drawn from seed + epoch.

    transformers' LengthGroupedSampler draws from the global torch RNG, so a resumed run sees a
    different order than an uninterrupted one; this one depends only on (seed, epoch), which
    the Trainer sets through `set_epoch`, so resuming reproduces the uninterrupted run exactly.
    """

    def __init__(self, lengths: list[int], group_size: int, seed: int) -> None:
        self.lengths, self.group_size, self.seed, self.epoch = list(lengths), group_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        import torch
        from transformers.trainer_pt_utils import get_length_grouped_indices

        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.group_size, generator=g))


class SeededShuffleSampler:
    """A permutation of range(n) drawn from seed + epoch (the packs' order): like SeededLengthGroupedSampler,
    it depends only on (seed, epoch), so a resumed run visits the same next pack."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = int(n), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        import torch

        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())


def make_trainer_class(base: type, label_only_loss: bool) -> type:
    """`base` (TRL's SFTTrainer, possibly Unsloth-patched) + automon's loss and log additions."""

    class AutomonSFTTrainer(base):  # type: ignore[misc, valid-type]
        automon_throughput: Throughput | None = None
        automon_packing: dict | None = None   # PackStats.summary() of a packed run (None: unpacked)
        automon_unsloth_checkpointing: bool = False   # Unsloth's own (offloaded) gradient checkpointing is on

        def _get_train_sampler(self, train_dataset=None):
            # self.train_dataset still has our "length" column; the one passed in had it removed.
            ds = self.train_dataset
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            if "seq_lengths" in ds.column_names:  # packed (automon.training.packing): one pack per micro-batch
                return SeededShuffleSampler(len(ds), seed)
            if self.args.train_sampling_strategy == "group_by_length" and "length" in ds.column_names:
                return SeededLengthGroupedSampler(
                    ds["length"], self.args.train_batch_size * self.args.gradient_accumulation_steps, seed)
            return super()._get_train_sampler(train_dataset)

        if label_only_loss:
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                loss, out = label_position_loss(model, inputs, num_items_in_batch)
                return (loss, out) if return_outputs else loss

        def log(self, logs: dict, start_time=None) -> None:
            if "loss" in logs and self.automon_throughput is not None:
                logs.update(self.automon_throughput.update(self.state.num_input_tokens_seen))
            super().log(logs, start_time)

    return AutomonSFTTrainer


def packed_or_not(cfg, tokenizer, dataset, max_seq_length: int, seq_lengths_kwarg: bool):
    """(train dataset, data collator or None, packing summary or None) for a trainer plug-in.

    With train.packing the examples are packed (automon.training.packing) and the packed rows checked
    against the examples (rule 5); without it the examples go to TRL's padding collator as before."""
    if not cfg.train.packing:
        return dataset, None, None
    t0 = time.perf_counter()
    on_cuda = cuda_available()
    budget = tokens_per_step(cfg, max_seq_length, on_cuda)
    packs, stats = pack_dataset(dataset, budget, cfg.train.seed)
    verify_packs(tokenizer, packs, dataset, end_of_turn_token(tokenizer))
    summary = stats.summary()
    log.info("packed %d examples into %d micro-batches of <= %d tokens (%.1f examples each, %.1f%% of the budget "
             "filled, %d examples over it trained alone) in %.1f s", stats.examples, stats.packs, budget,
             summary["examples_per_pack"], 100 * stats.fill, stats.over_budget, time.perf_counter() - t0)
    if not on_cuda:
        _warn_cpu_pack(stats.longest_pack)
    return packs, PackCollator(with_seq_lengths=seq_lengths_kwarg), summary


def describe_step(packing: dict | None, examples: int, mean_length: float, batch_size: int, grad_accum: int,
                  max_steps: int, epochs: float) -> str:
    """What one optimizer step holds (examples, tokens) and what the run's steps come to, for the log: with
    max_steps the share of an epoch they cover, else the steps of the epochs asked for."""
    if packing:
        packs = max(int(packing["packs"]), 1)
        per_step = min(grad_accum, packs)
        ex, tokens = per_step * examples / packs, per_step * packing["useful_tokens"] / packs
        what = (f"{per_step} pack{'s' if per_step > 1 else ''} of <= {packing['tokens_per_step']} tokens: "
                f"{ex:.1f} examples, {tokens:,.0f} tokens on average")
        steps_per_epoch = -(-packs // grad_accum)
    else:
        per_step = batch_size * grad_accum
        ex, tokens = per_step, per_step * mean_length
        what = f"{grad_accum} micro-batch{'es' if grad_accum > 1 else ''} of {batch_size} examples: {ex} examples, " \
               f"about {tokens:,.0f} tokens"
        steps_per_epoch = -(-examples // per_step)
    if max_steps > 0:
        span = f"{max_steps} steps = {max_steps / steps_per_epoch:.2f} epochs of {examples} examples"
    else:
        span = f"{epochs:g} epochs = {epochs * steps_per_epoch:.0f} steps of {steps_per_epoch} an epoch"
    return f"an optimizer step holds {what}; {span}"


CPU_PACK_WARN_TOKENS = 4096


def _warn_cpu_pack(tokens: int) -> None:
    """On CPU there is no gradient checkpointing and the attention runs over the whole pack (its mask and scores
    grow with the square of the pack's length), so a long pack needs far more memory than the short micro-batches
    of unpacked training. Not the logits: the loss runs the LM head on the answer tokens only (label_position_loss).
    Measured with model=tiny (peak RSS of one forward/backward, 300-token examples): 0.9 GiB at 4.2k tokens,
    1.4 GiB at 8.4k, 3.4 GiB at 16.8k; a larger model needs more. Said before the first step."""
    if tokens > CPU_PACK_WARN_TOKENS:
        log.warning("on CPU the longest pack is %d tokens: without gradient checkpointing its activations, and the "
                    "attention across it (growing with the square of its length), can need many GiB; if memory runs "
                    "out, lower train.tokens_per_step (e.g. 2048) or set train.packing=false", tokens)


# --------------------------------------------------------------------------------------------------
# Plug-ins

@dataclass
class TrainerPlugin:
    name: str
    prepare: Callable[[], None]
    # (cfg, model_path, tokenizer, train_dataset, sft_args, callbacks, max_seq_length) -> trainer
    build: Callable[..., Any]


def _torch_dtype(name: str, on_cuda: bool):
    import torch

    if name == "auto":
        return "auto"
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]
    if not on_cuda and dt is torch.float16:
        return torch.float32  # fp16 matmuls on CPU are slow and lossy; train fp32 there
    return dt


def _lora_config(cfg):
    from peft import LoraConfig

    lc = cfg.train.lora
    return LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=list(lc.targets),
                      bias="none", task_type="CAUSAL_LM")


def _prepare_peft() -> None:
    pass


def _build_peft(cfg, model_path: str, tokenizer, train_dataset, sft_args, callbacks, max_seq_length: int):
    from transformers import AutoModelForCausalLM
    from trl import SFTTrainer

    on_cuda = cuda_available()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            model_path, revision=cfg.model.revision, dtype=_torch_dtype(cfg.model.dtype, on_cuda),
            attn_implementation=cfg.trainer.attn_implementation)
    except Exception as e:  # noqa: BLE001 - re-raised with what to do
        raise ModelLoadError(_offline_hint(model_path, e)) from e
    train_dataset, collator, packing = packed_or_not(cfg, tokenizer, train_dataset, max_seq_length, False)
    cls = make_trainer_class(SFTTrainer, label_only_loss=True)
    trainer = cls(model=model, args=sft_args, train_dataset=train_dataset, processing_class=tokenizer,
                  peft_config=_lora_config(cfg), callbacks=callbacks, data_collator=collator)
    trainer.automon_packing = packing
    return trainer


def _prepare_unsloth() -> None:
    import sys

    late = [m for m in ("transformers", "trl", "peft") if m in sys.modules]
    if late:
        log.warning("unsloth imported after %s; its patches may be incomplete", ", ".join(late))
    import unsloth  # noqa: F401  (patches transformers / TRL on import)


def _build_unsloth(cfg, model_path: str, tokenizer, train_dataset, sft_args, callbacks, max_seq_length: int):
    from trl import SFTTrainer  # Unsloth's patched class, since unsloth was imported first
    from unsloth import FastLanguageModel

    gc = sft_args.gradient_checkpointing
    # A pack may be longer than max_seq_length when train.tokens_per_step is; Unsloth refuses longer inputs.
    longest = max(max_seq_length, tokens_per_step(cfg, max_seq_length)) if cfg.train.packing else max_seq_length
    try:
        # Our own tokenizer renders and tokenises (byte-identical to evaluation); Unsloth's copy is unused.
        model, _ = FastLanguageModel.from_pretrained(
            model_name=model_path, max_seq_length=longest,
            dtype=None if cfg.model.dtype == "auto" else _torch_dtype(cfg.model.dtype, True),
            load_in_4bit=cfg.trainer.load_in_4bit, full_finetuning=False, fix_tokenizer=False,
            revision=cfg.model.revision, random_state=cfg.train.seed,
            use_gradient_checkpointing="unsloth" if gc else False)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(_offline_hint(model_path, e)) from e
    lc = cfg.train.lora
    model = FastLanguageModel.get_peft_model(
        model, r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=list(lc.targets),
        bias="none", use_gradient_checkpointing="unsloth" if gc else False, random_state=cfg.train.seed)
    # Unsloth runs its own (offloaded) checkpointing; the Trainer must not wrap the model again.
    sft_args.gradient_checkpointing = False
    # Unsloth's attention keeps packed examples apart by `packed_seq_lengths` (flash-attn varlen, xformers
    # block-diagonal or an SDPA block mask, whichever it has); position ids alone do not reach it.
    train_dataset, collator, packing = packed_or_not(cfg, tokenizer, train_dataset, max_seq_length, True)
    cls = make_trainer_class(SFTTrainer, label_only_loss=False)
    trainer = cls(model=model, args=sft_args, train_dataset=train_dataset, processing_class=tokenizer,
                  callbacks=callbacks, data_collator=collator)
    trainer.automon_packing = packing
    trainer.automon_unsloth_checkpointing = bool(gc)   # what ran, though the Trainer's own flag is off
    return trainer


TRAINERS["peft"] = TrainerPlugin("peft", _prepare_peft, _build_peft)
TRAINERS["unsloth"] = TrainerPlugin("unsloth", _prepare_unsloth, _build_unsloth)
