"""Typed (dataclass) schemas for every Hydra config; unknown keys fail at start-up.

Each stage registers its schema with `register()`; entry points call it before @hydra.main runs.
"""

from automon.config.common import ModelConfig, PromptConfig, WandbConfig, register_common  # noqa: F401
