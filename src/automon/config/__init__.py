"""Typed (dataclass) schemas for every Hydra config; unknown keys fail at start-up.

Each stage registers its schema with `register()`; entry points call it before @hydra.main runs.
"""

from pathlib import Path

from automon.config.common import ModelConfig, PromptConfig, WandbConfig, register_common  # noqa: F401

# The repository's Hydra config tree (conf/), for code that reads a config group outside @hydra.main.
CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
