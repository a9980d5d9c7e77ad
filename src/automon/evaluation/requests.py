"""Render every test sample once with the shared renderer (automon.prompts) and shorten what is
too long for the model, the same way training does (middle of the RESPONSE only)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

from automon.evaluation.errors import EvalError
from automon.prompts import monitor_messages, prompt_text, shorten_middle
from automon.schema import Sample


@dataclass
class Rendered:
    sample: Sample
    messages: list[dict[str, str]]
    prompt: str | None        # None when no local tokenizer renders (openai backend)
    prompt_sha: str           # what the cache checks: the exact messages + thinking flag
    shortened: int = 0        # response tokens removed to fit max_seq_length


def messages_sha(messages: list[dict[str, str]], enable_thinking: bool) -> str:
    blob = json.dumps({"messages": messages, "enable_thinking": bool(enable_thinking)},
                      ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def render_all(samples: Sequence[Sample], *, version: str, shots: Sequence[Sample], tokenizer: Any,
               enable_thinking: bool, max_prompt_tokens: int | None) -> list[Rendered]:
    out = []
    for s in samples:
        msgs = monitor_messages(s, version, shots=shots)
        text = prompt_text(tokenizer, msgs, enable_thinking) if tokenizer is not None else None
        removed = 0
        # A token is at least one UTF-8 byte, so short texts need no tokenising.
        if text is not None and max_prompt_tokens and len(text.encode()) > max_prompt_tokens:
            text, msgs, removed = _fit(s, msgs, text, version, shots, tokenizer, enable_thinking,
                                       max_prompt_tokens)
        out.append(Rendered(s, msgs, text, messages_sha(msgs, enable_thinking), removed))
    return out


def _fit(s: Sample, msgs, text, version, shots, tokenizer, enable_thinking, budget):
    n = len(tokenizer.encode(text, add_special_tokens=False))
    removed_total = 0
    response = s.response
    for _ in range(4):
        if n <= budget:
            return text, msgs, removed_total
        resp_tokens = len(tokenizer.encode(response, add_special_tokens=False))
        keep = resp_tokens - (n - budget) - 32
        if keep < 16:
            break
        response, removed = shorten_middle(tokenizer, response, keep)
        removed_total += removed
        msgs = monitor_messages(s, version, shots=shots, response=response)
        text = prompt_text(tokenizer, msgs, enable_thinking)
        n = len(tokenizer.encode(text, add_special_tokens=False))
    if n <= budget:
        return text, msgs, removed_total
    raise EvalError(f"sample {s.id} ({s.source}) needs {n} prompt tokens even with its response shortened; "
                    f"the budget is {budget}. Raise backend.max_seq_length or use fewer/shorter shots.")
