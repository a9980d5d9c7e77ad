"""A training run from its config alone: the typed, checked config, the run directory it writes,
and whether that directory already holds it. train/sft.py (automon.training.run) and its currency
check (automon.training.status, which pipeline.py asks) both go through `resolve` and `run_status`,
so they agree on what is current (e.g. a changed train.logging_steps is not a new run: a finished
run stays finished, an unfinished one resumes).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

import automon.training.rundir as rd
from automon.config.checks import common_problem, wandb_problem
from automon.config.train import (ATTN_IMPLEMENTATIONS, LORA_TARGETS, LR_SCHEDULERS, LoraSection, SFTConfig,
                                  TrainSection, checkpointing_choice, token_budget)
from automon.data.io import Build, load_build
from automon.prompts import PROMPT_NAMES
from automon.stage_status import Status, flatten
from automon.training.errors import TrainConfigError, TrainError
from automon.training.sft_args import default_tokens_per_step
from automon.training import trainers
from automon.training.trainers import TRAINERS

WANDB_MODES = ("offline", "online", "disabled")
DTYPES = ("bfloat16", "float16", "float32", "auto")


def typed(cfg: Any) -> tuple[SFTConfig, dict]:
    """(typed config, resolved plain dict) from a Hydra DictConfig or an SFTConfig."""
    if isinstance(cfg, SFTConfig):
        return cfg, OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    return OmegaConf.to_object(cfg), OmegaConf.to_container(cfg, resolve=True)


def validate(c: SFTConfig) -> None:
    t = c.train
    defaults = {**{k: getattr(TrainSection(), k) for k in ("lr", "epochs", "warmup_ratio", "weight_decay",
                                                              "max_grad_norm")}, "lora.dropout": LoraSection().dropout}
    for key, default in defaults.items():  # inf passes `lr > 0` and trains every weight to NaN
        value = t.lora.dropout if key == "lora.dropout" else getattr(t, key)
        if not math.isfinite(value):
            raise TrainConfigError(f"train.{key}={value} is not a finite number", f"train.{key}",
                                   f"use a finite value (the default is {default})")
    bad_targets = [x for x in t.lora.targets if x not in LORA_TARGETS]
    checks = [
        (t.lr > 0, f"train.lr must be > 0, got {t.lr}"),
        (t.batch_size >= 1, f"train.batch_size must be >= 1, got {t.batch_size}"),
        (t.grad_accum is None or t.grad_accum >= 1, f"train.grad_accum must be >= 1 (or null), got {t.grad_accum}"),
        (t.max_steps == -1 or t.max_steps >= 1,
         f"train.max_steps={t.max_steps} is out of range (train.max_steps); use -1 (train for train.epochs) "
         "or a number of optimizer steps >= 1"),
        (t.max_steps > 0 or t.epochs > 0, "set train.epochs > 0 or train.max_steps > 0"),
        (256 <= t.max_seq_length, f"train.max_seq_length must be >= 256, got {t.max_seq_length}"),
        (t.lora.r >= 1 and t.lora.alpha > 0, f"train.lora.r must be >= 1 and alpha > 0, got {t.lora.r}/{t.lora.alpha}"),
        (0 <= t.lora.dropout < 1, f"train.lora.dropout must be in [0, 1), got {t.lora.dropout}"),
        (bool(t.lora.targets) and "lm_head" not in t.lora.targets,
         "train.lora.targets must be non-empty and must not include lm_head (vLLM cannot serve it; "
         "the loss reads lm_head.weight directly)"),
        (not bad_targets, f"train.lora.targets names {bad_targets}, which are not projections of the models "
                          f"automon trains (train.lora.targets); use some of: {', '.join(LORA_TARGETS)}"),
        (bool(c.trainer.attn_implementation.strip()),
         "trainer.attn_implementation= is empty (trainer.attn_implementation); use e.g. sdpa (the default) or eager"),
        (c.trainer.attn_implementation in ATTN_IMPLEMENTATIONS,
         f"trainer.attn_implementation={c.trainer.attn_implementation!r} is not a valid value "
         f"(trainer.attn_implementation); use one of: {', '.join(ATTN_IMPLEMENTATIONS)}"),
        (t.seed >= 0, f"train.seed={t.seed} is out of range (train.seed); use a value >= 0"),
        # a pack budget of an unpacked run would be ignored, yet it is part of the run's identity
        (t.packing or t.tokens_per_step is None,
         f"train.tokens_per_step={t.tokens_per_step} is set with train.packing=false (train.tokens_per_step, "
         "train.packing): an unpacked run has no pack budget; leave train.tokens_per_step unset (null), or "
         "train.packing=true to pack"),
        (t.lr_scheduler in LR_SCHEDULERS, f"train.lr_scheduler={t.lr_scheduler!r} is not a valid value "
                                          f"(train.lr_scheduler); use one of: {', '.join(LR_SCHEDULERS)}"),
        (t.save_steps >= 1 and t.logging_steps >= 1, "train.save_steps and train.logging_steps must be >= 1"),
        (0 <= t.warmup_ratio <= 1, f"train.warmup_ratio={t.warmup_ratio} is out of range (train.warmup_ratio); use a "
                                   "share of the training steps in [0, 1], e.g. 0.03"),
        (t.weight_decay >= 0, f"train.weight_decay={t.weight_decay} is out of range (train.weight_decay); use a "
                              "value >= 0"),
        (t.max_grad_norm >= 0, f"train.max_grad_norm={t.max_grad_norm} is out of range (train.max_grad_norm); use "
                               "a value >= 0 (0: no clipping)"),
        (t.save_total_limit >= 1, f"train.save_total_limit={t.save_total_limit} is out of range "
                                  "(train.save_total_limit); keep >= 1 checkpoint (a killed run resumes from it)"),
        (t.epochs >= 0, f"train.epochs={t.epochs} is out of range (train.epochs); use a value > 0"),
        (c.prompt.name in PROMPT_NAMES, f"unknown prompt {c.prompt.name!r}; choose prompt=<name> with one of: "
                                        f"{', '.join(PROMPT_NAMES)}"),
        (c.wandb.mode in WANDB_MODES, f"wandb.mode must be one of {', '.join(WANDB_MODES)}, got {c.wandb.mode!r}"),
        (c.model.dtype in DTYPES, f"model.dtype must be one of {', '.join(DTYPES)}, got {c.model.dtype!r}"),
        (c.model.pretrained != "api",
         f"model={c.model.name} is a monitor behind an API (evaluation only); train a local model such as "
         "model=qwen3_4b_instruct_2507, model=qwen3_8b or model=tiny"),
        (c.trainer.name in ("auto", *TRAINERS),
         f"trainer.name must be one of auto, {', '.join(TRAINERS)}, got {c.trainer.name!r}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise TrainConfigError(msg)
    for key, check, value in (("train.tokens_per_step", token_budget, t.tokens_per_step),
                              ("trainer.gradient_checkpointing", checkpointing_choice, c.trainer.gradient_checkpointing)):
        try:
            check(value)
        except ValueError as e:
            raise TrainConfigError(str(e)) from None
    problem = common_problem(c) or wandb_problem(c.wandb)
    if problem:
        raise TrainConfigError(problem)


def run_dir_for(c: SFTConfig, subset_label: str) -> Path:
    if c.output_dir:
        return Path(c.output_dir)
    return Path("runs") / rd.run_name(subset_label, c.model.name, c.prompt.name, c.train.seed)


@dataclass
class ResolvedRun:
    """A training config as the run sees it: typed, resolved to plain data, and where it writes."""
    cfg: SFTConfig
    resolved: dict       # what <run>/config.yaml records (output_dir filled in)
    subsets: list[str]
    label: str           # subset label: `safety_qa`, `all`, `a+b`
    run_dir: Path
    build: Build
    tokens_per_step_asked: Any = None   # train.tokens_per_step as given (null: the device's default)


def resolve(cfg: Any) -> ResolvedRun:
    """Raises TrainConfigError on a bad config and BuildNotFound without a data build."""
    c, resolved = typed(cfg)
    validate(c)
    subsets = rd.subset_names(c.subset.include)
    label = rd.subset_label(subsets)
    run_dir = run_dir_for(c, label)
    resolved["output_dir"] = str(run_dir)
    # null grad_accum depends on train.packing: record the number trained with (8 reproduces older runs)
    c.train.grad_accum = resolved["train"]["grad_accum"] = c.train.accumulation()
    # the pack budget as the number trained with: 16k is 16384, and null the default of the device the run
    # started on (a resumed run keeps its budget on any device; overwrite=true starts a new one here; unpacked
    # runs have none)
    budget = token_budget(c.train.tokens_per_step)
    if c.train.packing and budget is None:
        budget = default_tokens_per_step(max_seq_length(c), started_on_cuda(None if c.overwrite else run_dir))
    asked, c.train.tokens_per_step = c.train.tokens_per_step, budget
    resolved["train"]["tokens_per_step"] = budget
    return ResolvedRun(c, resolved, subsets, label, run_dir, load_build(c.data.dir), asked)


def max_seq_length(c: SFTConfig) -> int:
    """train.max_seq_length clamped to the model's positions: the longest example, and the GPU's pack budget."""
    return min(c.train.max_seq_length, c.model.max_position_embeddings)


def started_on_cuda(run_dir: Path | None) -> bool:
    """Whether the run in `run_dir` started on a CUDA GPU (run.json's started_on, or device for runs recorded
    before it), else (no run there, or None) whether this process has one: what train.tokens_per_step=null
    resolves by."""
    try:
        info = rd.read_run_info(run_dir) if run_dir is not None and rd.is_run_dir(run_dir) else None
    except TrainError:
        info = None
    device = (info or {}).get("started_on") or (info or {}).get("device")
    if isinstance(device, str) and device:
        return device.startswith("cuda")
    return trainers.cuda_available()


# Keys added to the training config after runs were recorded without them, with the value that trains
# exactly as those runs did: a run recorded without the key is the run of a config that has that value
# (train.packing=false finds a run from before packing; the packed default is a different run).
ADDED_KEYS = {"train.packing": False, "train.tokens_per_step": None}


def _as_recorded(r: ResolvedRun) -> dict:
    """r.resolved without the ADDED_KEYS that the run dir's config.yaml lacks, where they have their old value;
    and with train.tokens_per_step null where the run recorded null, from before null was per device, and the
    budget now is what null meant then (max_seq_length): the same packs. (A CPU run of that time packed
    max_seq_length tokens a step, not the CPU default: another run.)"""
    try:
        old = flatten(OmegaConf.to_container(OmegaConf.load(r.run_dir / "config.yaml")))
    except Exception:  # noqa: BLE001 - absent or damaged: rundir.run_status says what is wrong with it
        return r.resolved
    cfg = copy.deepcopy(r.resolved)
    for key, value in ADDED_KEYS.items():
        section, name = key.split(".")
        if key not in old and name in cfg.get(section, {}) and cfg[section][name] == value:
            del cfg[section][name]
    t = cfg.get("train", {})
    if (old.get("train.tokens_per_step", "absent") is None and old.get("train.packing") is True
            and t.get("packing") is True and t.get("tokens_per_step") == max_seq_length(r.cfg)):
        t["tokens_per_step"] = None
    return cfg


def run_status(r: ResolvedRun) -> Status:
    return rd.run_status(r.run_dir, _as_recorded(r), r.build.manifest_hash, str(r.build.path))
