"""Config pieces shared by training and evaluation: model, prompt, wandb, the data build they read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore

from automon.errors import ConfigError  # noqa: F401  (defined below every package: backends raise it too)
from automon.models.loading import API_MODEL  # noqa: F401  (the model= of backend=openai)


@dataclass
class ModelConfig:
    # Short name used in run-directory names and reports (== the conf/model/<name>.yaml option).
    name: str = "qwen3_4b_instruct_2507"
    # Hub id or local directory. "tiny" means: build the tiny random Qwen3 offline (automon.models.tiny).
    pretrained: str = "Qwen/Qwen3-4B-Instruct-2507"
    revision: Optional[str] = None  # hub revision (commit, tag); null = main
    # Qwen3 hybrid models render with enable_thinking=False so the first answer token is yes/no.
    enable_thinking: bool = False
    dtype: str = "bfloat16"  # bfloat16 | float32 | float16 | auto
    # Largest context the model supports; training/eval clamp max_seq_length to it.
    max_position_embeddings: int = 32768


# Where data_build/build.py writes when out= is not given (conf/build.yaml), and so where training and
# evaluation look for a build by default. A name, not a version: a build's identity is its manifest.
DEFAULT_BUILD_DIR = "data/builds/default"


@dataclass
class DataConfig:
    """The data build a stage reads (training: its train split)."""
    dir: str = DEFAULT_BUILD_DIR  # a build written by data_build/build.py


@dataclass
class PromptConfig:
    # The prompt's one name: its automon.prompts.templates registry key == the conf/prompt/<name>.yaml
    # option == the run/eval directory component == adapter metadata == cache key (e.g. direct_v1).
    # Each stage checks it against the registry (training: validate(); evaluation: HoldoutConfig).
    name: str = "direct_v1"


@dataclass
class WandbConfig:
    mode: str = "offline"  # offline (no key needed) | online | disabled
    project: str = "automon"  # wandb project
    entity: Optional[str] = None  # wandb team/user; null = your default
    dir: Optional[str] = None  # default: inside the run directory


def register_common(cs: ConfigStore | None = None) -> None:
    cs = cs or ConfigStore.instance()
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="prompt", name="prompt_schema", node=PromptConfig)
