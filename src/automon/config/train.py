"""Schema of conf/sft.yaml (train/sft.py). Unknown keys and typos fail at start-up.

Defaults are automon's (the paper's hyperparameters are unpublished): LoRA r=32, alpha=32,
lr 1e-4, 3 epochs, packed micro-batches of up to max_seq_length tokens on a CUDA GPU and 4,096 on CPU, one
per optimizer step (unpacked: effective batch 16 = 2 per device x 8 accumulation). docs/training.md gives
the rationale for each value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from hydra.core.config_store import ConfigStore

from automon.config.help import register_help

from automon.config.common import DataConfig, ModelConfig, PromptConfig, WandbConfig, register_common
from automon.subsets import ALL
from automon.subsets import names as subset_names

# The projections of the decoder blocks of the model families automon trains (Qwen3, Llama/SmolLM2):
# train.lora.targets must name some of them (a name the model lacks fails inside PEFT, after loading).
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# transformers' SchedulerType values that need no lr_scheduler_kwargs and no evaluation metric
# (tests/training/test_train_config.py checks they are transformers' names).
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                 "inverse_sqrt")

# train.tokens_per_step: a packed micro-batch's token budget, a number of tokens or the same with a k suffix
# (16k = 16,384). Below 256 no prompt fits; above 1M tokens no single GPU holds a step (an extra digit).
TOKENS_PER_STEP_MIN = 256
TOKENS_PER_STEP_MAX = 1 << 20
# The budget of train.tokens_per_step=null on CPU, measured on 2 cores with model=tiny (bench/bench_train_cpu.py,
# docs/training.md#cpu-and-gpu): a CPU step's time grows faster than its tokens (attention over the whole pack),
# and 4,096 tokens hold about 14 corpus examples, the 16 of an unpacked step. CUDA's is max_seq_length.
CPU_TOKENS_PER_STEP = 4096
# trainer.attn_implementation (the peft trainer's attention; transformers' names). sdpa and eager get packs as a
# dense block-diagonal mask; flex_attention (CUDA: torch's FlexAttention has no CPU backward) as a sparse
# document mask, flash_attention_2/3 (CUDA, their packages) as variable-length sequences: no dense mask.
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")
VARLEN_ATTENTION = ("flex_attention", "flash_attention_2", "flash_attention_3")
GRADIENT_CHECKPOINTING = ("true", "false", "auto")


def token_budget(value: Any) -> Optional[int]:
    """train.tokens_per_step as a number of tokens (None: null, the device's default). Accepts an int or a
    string of digits with an optional k suffix (`32k` = 32,768); raises ValueError saying what is accepted."""
    if value is None:
        return None
    n = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str):
        text = value.strip().lower().replace("_", "").replace(",", "")
        k = text.endswith("k")
        digits = text[:-1] if k else text
        if digits.isdigit():
            n = int(digits) * (1024 if k else 1)
    if n is None or not TOKENS_PER_STEP_MIN <= n <= TOKENS_PER_STEP_MAX:
        raise ValueError(
            f"train.tokens_per_step={value!r} is not a token budget (train.tokens_per_step); use null (the "
            f"device's default: {CPU_TOKENS_PER_STEP} tokens on CPU, train.max_seq_length on a CUDA GPU), a number "
            f"of tokens from {TOKENS_PER_STEP_MIN} to {TOKENS_PER_STEP_MAX:,}, or the same with a k suffix "
            "(16k, 32k, 64k, 128k)")
    return n


def checkpointing_choice(value: Any) -> str:
    """trainer.gradient_checkpointing as 'true', 'false' or 'auto' (null is auto); ValueError otherwise."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.strip().lower() in GRADIENT_CHECKPOINTING:
        return value.strip().lower()
    raise ValueError(f"trainer.gradient_checkpointing={value!r} is not a valid value (trainer.gradient_checkpointing); "
                     "use true, false or auto (off on CPU; on a CUDA GPU off only where a recorded run without it "
                     "fitted at this token budget, docs/training.md)")


@dataclass
class SubsetSelection:
    """Which training subsets form the corpus. Each option of the `subset` group (stored by `register`
    from the subset registry, automon.subsets) sets include.<name>: true, so `subset=[safety_qa,sg_code]`
    (Hydra multi-select) merges two of them, `subset=all` sets every subset and
    `subset=all subset.include.sg_code=false` trains on everything but sg_code."""
    include: Dict[str, bool] = field(default_factory=dict)  # set by subset=...; include.<name>=false drops one


@dataclass
class LoraSection:
    r: int = 32                    # LoRA rank
    alpha: int = 32                # LoRA scale numerator (scale = alpha / r)
    dropout: float = 0.0  # 0: deterministic, and PEFT keeps no dropped copies of long inputs
    targets: List[str] = field(default_factory=lambda: list(LORA_TARGETS))  # modules that get LoRA (never lm_head)


@dataclass
class TrainSection:
    lora: LoraSection = field(default_factory=LoraSection)
    lr: float = 1e-4               # peak learning rate
    epochs: float = 3.0            # passes over the corpus (unless max_steps)
    max_steps: int = -1            # optimizer steps; -1 = train for epochs (0 is refused)
    # Padding-free packing: a micro-batch is one pack of whole examples laid end to end (position ids
    # restart per example, no attention across examples), up to tokens_per_step tokens.
    # false: batch_size examples per micro-batch, padded to the longest (the training before packing).
    packing: bool = True
    # Token budget of one packed micro-batch (one forward/backward): tokens, or with a k suffix (16k, 32k, 64k,
    # 128k). null = per device: on a CUDA GPU max_seq_length, so a pack never needs more memory than the
    # longest single example (32k on the corpus's lengths: 12.7 GiB unsloth, 25.2 GiB peft on an H200); on CPU
    # 4,096 (CPU_TOKENS_PER_STEP, at most max_seq_length). config.yaml records the number trained with.
    tokens_per_step: Optional[Union[int, str]] = None
    batch_size: int = 2            # examples per micro-batch, unpacked only (packed: one pack)
    # Micro-batches per optimizer step; null = 1 packed (a step of tokens_per_step tokens), 8 unpacked
    # (2 x 8 = 16 examples, as before packing).
    grad_accum: Optional[int] = None
    # Tokens per sample (prompt + answer). Longer samples get their RESPONSE shortened in the
    # middle; clamped to model.max_position_embeddings.
    max_seq_length: int = 32768
    seed: int = 0                  # data order, LoRA init; part of the run-dir name
    lr_scheduler: str = "cosine"   # a transformers scheduler name (LR_SCHEDULERS)
    warmup_ratio: float = 0.03     # share of steps warming the lr up
    weight_decay: float = 0.0      # AdamW weight decay
    max_grad_norm: float = 1.0     # gradient clipping
    logging_steps: int = 10        # metrics.jsonl / log line every N steps
    save_steps: int = 250          # checkpoint every N optimizer steps (and on SIGTERM/SIGUSR1)
    save_total_limit: int = 2      # checkpoints kept
    # Unpacked only: sample batches of similar length (less padding with a long-tailed length mix).
    group_by_length: bool = True

    def accumulation(self) -> int:
        """train.grad_accum with its null resolved (1 packed, 8 unpacked)."""
        if self.grad_accum is not None:
            return self.grad_accum
        return 1 if self.packing else 8


@dataclass
class TrainerConfig:
    # auto: unsloth when CUDA and the unsloth package are available, else peft.
    name: str = "auto"             # auto | peft | unsloth
    # true | false | auto (null: auto). auto: off on CPU; on a CUDA GPU off where a recorded run without it
    # fitted this model and trainer at the step's tokens (sft_args.NO_CHECKPOINTING_FITS), else on.
    gradient_checkpointing: Optional[Union[bool, str]] = "auto"
    # peft trainer only: sdpa | eager (a pack's dense block-diagonal mask), flex_attention | flash_attention_2 |
    # flash_attention_3 (packs as variable-length sequences, no dense mask; CUDA only)
    attn_implementation: str = "sdpa"
    # peft trainer only, CUDA only: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU; TRL's use_liger_kernel);
    # needs the liger-kernel package
    liger: bool = False
    load_in_4bit: bool = False     # unsloth only; bf16 LoRA fits 32k on an 80 GB H100


@dataclass
class SFTConfig:
    subset: SubsetSelection = field(default_factory=SubsetSelection)
    model: ModelConfig = field(default_factory=ModelConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainSection = field(default_factory=TrainSection)
    # null: runs/<subset>__<model>__<prompt>__seed<seed> (relative to the current directory).
    output_dir: Optional[str] = None
    # true: delete an existing run dir that holds a different config / data and start again.
    overwrite: bool = False


def register(cs: ConfigStore | None = None) -> None:
    cs = cs or ConfigStore.instance()
    register_help()
    register_common(cs)
    cs.store(name="sft_schema", node=SFTConfig)
    register_subset_options(cs)
    cs.store(group="trainer", name="trainer_schema", node=TrainerConfig)


def register_subset_options(cs: ConfigStore | None = None) -> None:
    """The `subset` group: one option per registered subset and `all`, generated from the registry
    (no conf/subset/*.yaml files)."""
    cs = cs or ConfigStore.instance()
    for name in subset_names():
        cs.store(group="subset", name=name, node={"include": {name: True}})
    cs.store(group="subset", name=ALL, node={"include": {name: True for name in subset_names()}})
