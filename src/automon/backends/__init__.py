"""Judge backends behind one interface (`Judge.score(requests) -> results`), chosen by backend=.

The registry below is the one list of backends: each entry is that backend's config schema
(conf/backend/<name>.yaml is validated by it), which also says what identifies the backend's
predictions and builds its judge. Heavy imports (torch/transformers for hf, vllm, openai) happen
only when a judge is built, so importing automon never needs a GPU stack or an API client.
"""

from __future__ import annotations

from typing import Any, Sequence

from automon.backends.base import (  # noqa: F401
    EVIDENCE_JSON_SCHEMA,
    AnswerTokens,
    BackendConfig,
    Judge,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeTiming,
    LoraAdapter,
    single_token_ids,
)
from automon.backends.hf import HFConfig
from automon.backends.inspect_log import InspectLogConfig
from automon.backends.openai_api import OpenAIConfig
from automon.backends.probe import ProbeConfig
from automon.backends.reference import ReferenceConfig
from automon.backends.vllm_engine import VLLMConfig

# backend= option -> its schema. Each schema's `name` default is its option name.
BACKENDS: dict[str, type[BackendConfig]] = {cls.name: cls for cls in (VLLMConfig, HFConfig, OpenAIConfig,
                                                                                  ProbeConfig, ReferenceConfig,
                                                                                  InspectLogConfig)}


def make_judge(cfg: Any, prompt_kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> Judge:
    """The judge of one evaluation (cfg: HoldoutConfig); the backend's config builds it."""
    return cfg.backend.make_judge(cfg.model, prompt_kind, adapters, tokenizer)
