"""Schema of conf/sft.yaml (train/sft.py). Unknown keys and typos fail at start-up.

Defaults are automon's (the paper's hyperparameters are unpublished): LoRA r=32, alpha=32,
lr 1e-4, 3 epochs, packed micro-batches of up to max_seq_length tokens, one per optimizer step
(unpacked: effective batch 16 = 2 per device x 8 accumulation). docs/training.md gives the rationale
for each value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

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
    # Token budget of one packed micro-batch (one forward/backward); null = max_seq_length, so a pack never
    # needs more memory than the longest single example (32k on the corpus's lengths: 12.7 GiB unsloth,
    # 25.2 GiB peft on an H200, 5.2x / 3.0x unpacked throughput; docs/training.md#packing).
    tokens_per_step: Optional[int] = None
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
    # null = on with CUDA (needed for 16k-32k tokens), off on CPU (nothing to save there).
    gradient_checkpointing: Optional[bool] = None
    attn_implementation: str = "sdpa"  # peft trainer only
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
