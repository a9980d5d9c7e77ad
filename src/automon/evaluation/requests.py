"""Render every test sample once, fitted to the backend's length limit by the function training uses
(automon.prompts.fit_prompts): at the same limit (backend.max_seq_length = train.max_seq_length) a
sample's evaluation prompt is its training prompt; a larger evaluation limit shortens fewer samples
(conf/experiment/mini.yaml trains at 512 tokens and evaluates at 1024; its comment gives what each limit shortens)."""

from __future__ import annotations

from typing import Any, Sequence

from automon.evaluation.errors import EvalError
from automon.monitors.base import Rendered, messages_sha
from automon.prompts import PromptFitError, fit_prompts, monitor_messages
from automon.schema import Sample


def render_all(samples: Sequence[Sample], *, prompt: str, shots: Sequence[Sample], tokenizer: Any,
               enable_thinking: bool, max_seq_length: int | None) -> list[Rendered]:
    """Every sample's request. Without a tokenizer (openai) nothing can be measured or fitted: the
    messages go out whole and the server applies its own chat template."""
    if tokenizer is None:
        messages = [monitor_messages(s, prompt, shots=shots) for s in samples]
        return [Rendered(s, m, None, messages_sha(m, enable_thinking)) for s, m in zip(samples, messages)]
    try:
        fitted = fit_prompts(tokenizer, samples, prompt, shots=shots, enable_thinking=enable_thinking,
                             max_seq_length=max_seq_length, limit_name="backend.max_seq_length")
    except PromptFitError as e:
        raise EvalError(str(e)) from None
    return [Rendered(s, f.messages, f.text, messages_sha(f.messages, enable_thinking), f.tokens_removed)
            for s, f in zip(samples, fitted)]
