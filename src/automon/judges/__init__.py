"""Judge backends behind one interface (`Judge.score(requests) -> results`), chosen by backend=.

Heavy imports (torch/transformers for hf, vllm, openai) happen inside each factory, so importing
automon never needs a GPU stack or an API client.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from automon.judges.base import (  # noqa: F401
    EVIDENCE_JSON_SCHEMA,
    AnswerTokens,
    Judge,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeTiming,
    LoraAdapter,
    single_token_ids,
)


def _hf(cfg: Any, kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> Judge:
    from automon.judges.hf import HFJudge

    return HFJudge(cfg.model, cfg.backend, kind, adapters, tokenizer)


def _vllm(cfg: Any, kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> Judge:
    from automon.judges.vllm_engine import VLLMJudge

    return VLLMJudge(cfg.model, cfg.backend, kind, adapters, tokenizer, cfg.model.enable_thinking)


def _openai(cfg: Any, kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> Judge:
    from automon.judges.openai_api import OpenAIJudge

    return OpenAIJudge(cfg.judge, cfg.model, cfg.backend, kind, adapters, cfg.model.enable_thinking)


# name -> factory(cfg: HoldoutConfig, kind, adapters, tokenizer or None)
BACKENDS: dict[str, Callable[..., Judge]] = {"hf": _hf, "vllm": _vllm, "openai": _openai}
# Backends that render prompts with a local tokenizer (and can shorten over-long responses).
LOCAL_TOKENIZER = {"hf", "vllm"}


def make_judge(cfg: Any, kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> Judge:
    try:
        factory = BACKENDS[cfg.backend.name]
    except KeyError:
        raise JudgeError(f"unknown backend {cfg.backend.name!r}; known: {', '.join(BACKENDS)}") from None
    return factory(cfg, kind, adapters, tokenizer)
