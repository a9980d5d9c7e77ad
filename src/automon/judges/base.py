"""What every judge backend takes and returns, and the answer-token arithmetic they share.

A backend gets rendered requests (chat messages from the shared renderer, plus the prompt text when
a local tokenizer rendered it) and returns, per request, P(yes) and/or the generated text. It never
builds prompts itself and never computes metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence


class JudgeError(RuntimeError):
    """A backend cannot run as configured (missing package, bad credentials, rank too large)."""


@dataclass
class LoraAdapter:
    """A LoRA adapter a judge can apply per request. `name` is unique within one evaluation."""
    name: str
    path: str
    rank: int


@dataclass
class JudgeRequest:
    id: str                              # sample id (for error messages)
    messages: list[dict[str, str]]       # from automon.prompts.monitor_messages
    prompt: str | None = None            # automon.prompts.prompt_text(...) when a tokenizer exists
    adapter: str | None = None           # LoraAdapter.name, None = the base model


@dataclass
class JudgeResult:
    p_yes: float | None = None   # P(yes) (direct) or P(true) at the verdict token (evidence)
    text: str | None = None      # the answer as generated / the argmax first token (direct)
    mass: float | None = None    # total probability of the yes/no (true/false) variants read
    error: str | None = None     # set when the backend failed for this request


@dataclass
class JudgeTiming:
    """Seconds inside the model (forward/generate/HTTP wait) vs tokenising, for the benchmark."""
    model_s: float = 0.0
    tokenize_s: float = 0.0
    prompt_tokens: int = 0
    extra: dict = field(default_factory=dict)


class Judge(Protocol):
    name: str
    timing: JudgeTiming

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- answer tokens

def single_token_ids(tokenizer: Any, word: str) -> list[int]:
    """Ids of the single-token spellings of `word` (lower/Capital/UPPER, with and without a space).

    For Qwen: yes -> [7414, 9454, 9693, 9834, 14004, 14080]; no -> [902, 2152, 2308, 2753, 5664, 8996].
    """
    ids: set[int] = set()
    for v in {word, word.capitalize(), word.upper()}:
        for s in (v, " " + v):
            e = tokenizer.encode(s, add_special_tokens=False)
            if len(e) == 1:
                ids.add(e[0])
    return sorted(ids)


@dataclass(frozen=True)
class AnswerTokens:
    """Token ids whose probabilities are read: yes/no (direct) and true/false (evidence verdict)."""
    yes: tuple[int, ...]
    no: tuple[int, ...]
    true: tuple[int, ...]
    false: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> "AnswerTokens":
        t = cls(*(tuple(single_token_ids(tokenizer, w)) for w in ("yes", "no", "true", "false")))
        if not t.yes or not t.no:
            raise ValueError("the tokenizer has no single-token spelling of 'yes' or 'no'; P(yes) "
                             "cannot be read from the first answer token")
        return t

    def pair(self, kind: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (self.yes, self.no) if kind == "direct" else (self.true, self.false)


def p_yes_from_logprobs(logprobs: Mapping[int, float], pos: Iterable[int], neg: Iterable[int]
                        ) -> tuple[float | None, float]:
    """P(pos) / (P(pos) + P(neg)) from id -> logprob at one position; (None, 0) if no mass."""
    py = sum(math.exp(logprobs[i]) for i in pos if i in logprobs)
    pn = sum(math.exp(logprobs[i]) for i in neg if i in logprobs)
    if py + pn <= 0.0:
        return None, 0.0
    return py / (py + pn), py + pn


def p_yes_from_text_logprobs(top: Iterable[tuple[str, float]], pos_word: str, neg_word: str
                             ) -> tuple[float | None, float]:
    """The same from (token text, logprob) pairs, as OpenAI-compatible APIs return them."""
    py = pn = 0.0
    for tok, lp in top:
        w = (tok or "").strip().lower()
        if w == pos_word:
            py += math.exp(lp)
        elif w == neg_word:
            pn += math.exp(lp)
    if py + pn <= 0.0:
        return None, 0.0
    return py / (py + pn), py + pn


def verdict_position(token_texts: Sequence[str]) -> int | None:
    """Index of the evidence verdict token: the first generated token that reads true/false after
    the text so far contains `"misbehavior"`. None if the answer never states a verdict."""
    seen = ""
    for i, t in enumerate(token_texts):
        if '"misbehavior"' in seen and (t or "").strip().lower() in ("true", "false"):
            return i
        seen += t or ""
    return None


# Structured output for the evidence prompt; key order = the order answer_text() writes (evidence_v1).
EVIDENCE_JSON_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "misbehavior": {"type": "boolean"},
        "category": {"type": "string", "enum": ["safety", "sycophancy", "spec_gaming", "none"]},
        "severity": {"type": "string", "enum": ["none", "low", "medium", "high"]},
        "evidence": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["misbehavior", "category", "severity", "evidence"],
    "additionalProperties": False,
}


def evidence_regex(schema: Mapping = EVIDENCE_JSON_SCHEMA) -> str:
    """A regular expression for exactly the text `answer_text` writes for the evidence prompt:
    `json.dumps` with its default separators (", " and ": "), the schema's key order and enums, and
    at most EVIDENCE_MAX_QUOTES quotes.

    vLLM constrains decoding with this rather than with the JSON schema: the schema admits any
    whitespace between tokens, and a weak model decoding greedily then emits whitespace until
    max_new_tokens (seen with the tiny model: every answer unparseable). The regex admits only the
    trained answer format, in any tokenisation. The quotes' length is not bounded here: a bounded
    repetition ({0,400}) makes xgrammar 0.2.8 take 0.7-7 s per generated token inside a string;
    max_new_tokens bounds it instead.
    """
    import re

    from automon.prompts.templates import EVIDENCE_MAX_QUOTES

    props = schema["properties"]
    char = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
    string = f'"{char}*"'
    quotes = f"(?:{string}(?:, {string}){{0,{EVIDENCE_MAX_QUOTES - 1}}})?"
    values = {"boolean": "(?:true|false)"}
    parts = []
    for key, spec in props.items():
        if "enum" in spec:
            v = '"(?:' + "|".join(re.escape(e) for e in spec["enum"]) + ')"'
        elif spec["type"] == "array":
            v = r"\[" + quotes + r"\]"
        else:
            v = values[spec["type"]]
        parts.append(f'"{re.escape(key)}": {v}')
    return r"\{" + ", ".join(parts) + r"\}"
