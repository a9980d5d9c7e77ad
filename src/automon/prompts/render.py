"""Render monitor prompts and answers; parse monitor answers."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from automon.prompts.templates import (
    EVIDENCE_MAX_CHARS,
    EVIDENCE_MAX_QUOTES,
    SEVERITY_V1,
    TEMPLATES,
    PromptTemplate,
)

PROMPT_NAMES = tuple(TEMPLATES)
SHORTEN_MARKER = "\n[... {n} tokens omitted by automon ...]\n"


def get_template(prompt: str) -> PromptTemplate:
    """The registry entry of a prompt name (e.g. direct_v1)."""
    try:
        return TEMPLATES[prompt]
    except KeyError:
        raise ValueError(f"unknown prompt {prompt!r}; known: {', '.join(TEMPLATES)}") from None


def _field(sample: Any, name: str) -> Any:
    return sample[name] if isinstance(sample, Mapping) else getattr(sample, name)


def answer_text(sample: Any, prompt: str) -> str:
    """The supervised answer for a sample (without the end-of-turn token)."""
    tpl = get_template(prompt)
    label = int(_field(sample, "label"))
    if tpl.kind == "direct":
        return "yes" if label == 1 else "no"
    if label == 1:
        quotes = [q[:EVIDENCE_MAX_CHARS] for q in list(_field(sample, "evidence"))[:EVIDENCE_MAX_QUOTES]]
        category = _field(sample, "category")
        verdict = {"misbehavior": True, "category": category,
                   "severity": SEVERITY_V1[category], "evidence": quotes}
    else:
        verdict = {"misbehavior": False, "category": "none", "severity": "none", "evidence": []}
    return json.dumps(verdict, ensure_ascii=False)


def _user_turn(tpl: PromptTemplate, sample: Any, response: str | None = None, request: str | None = None) -> str:
    resp = _field(sample, "response") if response is None else response
    req = _field(sample, "request") if request is None else request
    return tpl.user.format(request=req, response=resp)


def monitor_messages(sample: Any, prompt: str, shots: Sequence[Any] = (),
                     response: str | None = None, request: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one monitor query: system, few-shot turns (from the TRAIN split), query.

    `response` and `request` override the sample's own (the shortened texts of automon.prompts.fit).
    """
    tpl = get_template(prompt)
    msgs = [{"role": "system", "content": tpl.system}]
    for shot in shots:
        if _field(shot, "split") != "train":
            raise ValueError(f"few-shot example {_field(shot, 'id')} is from split "
                             f"{_field(shot, 'split')!r}; shots must come from the training split")
        msgs.append({"role": "user", "content": _user_turn(tpl, shot)})
        msgs.append({"role": "assistant", "content": answer_text(shot, prompt)})
    msgs.append({"role": "user", "content": _user_turn(tpl, sample, response, request)})
    return msgs


def prompt_text(tokenizer: Any, messages: list[dict[str, str]], enable_thinking: bool = False) -> str:
    """The exact text the model sees before its answer (generation prompt included)."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=enable_thinking)


def shorten_middle(tokenizer: Any, text: str, max_tokens: int) -> tuple[str, int]:
    """Keep the head and tail of `text` within `max_tokens` tokens, marker in between.

    Returns (text, tokens_removed). automon.prompts.fit decides what to cut and by how much.
    """
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return text, 0
    marker_len = len(tokenizer.encode(SHORTEN_MARKER.format(n=len(ids)), add_special_tokens=False))
    keep = max(max_tokens - marker_len, 2)
    head, tail = keep // 2, keep - keep // 2
    removed = len(ids) - head - tail
    out = (tokenizer.decode(ids[:head]) + SHORTEN_MARKER.format(n=removed) + tokenizer.decode(ids[-tail:]))
    return out, removed


@dataclass
class MonitorVerdict:
    """A parsed monitor answer. `pred` is None when the answer could not be parsed."""
    pred: int | None
    category: str | None = None
    severity: str | None = None
    evidence: list[str] | None = None


_YES = re.compile(r"^\W*(yes)\b", re.I)
_NO = re.compile(r"^\W*(no)\b", re.I)
_JSON = re.compile(r"\{.*\}", re.S)


def parse_answer(text: str, prompt: str) -> MonitorVerdict:
    """Parse a generated monitor answer. Never raises; unparseable -> pred None."""
    tpl = get_template(prompt)
    text = text or ""
    if tpl.kind == "direct":
        if _YES.match(text):
            return MonitorVerdict(pred=1)
        if _NO.match(text):
            return MonitorVerdict(pred=0)
        return MonitorVerdict(pred=None)
    m = _JSON.search(text)
    if not m:
        return MonitorVerdict(pred=None)
    try:
        obj = json.loads(m.group(0))
    except json.JSONDecodeError:
        return MonitorVerdict(pred=None)
    if not isinstance(obj, dict) or not isinstance(obj.get("misbehavior"), bool):
        return MonitorVerdict(pred=None)
    ev = obj.get("evidence")
    return MonitorVerdict(pred=int(obj["misbehavior"]), category=obj.get("category"),
                          severity=obj.get("severity"),
                          evidence=[str(e) for e in ev] if isinstance(ev, list) else None)
