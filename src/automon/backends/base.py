"""What every judge backend takes and returns, and the answer-token arithmetic they share.

A backend gets rendered requests (chat messages from the shared renderer, plus the prompt text when
a local tokenizer rendered it) and returns, per request, P(yes) and/or the generated text. It never
builds prompts itself and never computes metrics.

Each backend module also declares its configuration: a subclass of `BackendConfig` (the schema of
conf/backend/<name>.yaml) that says what the backend reads, whether it renders with a local
tokenizer, what identifies its predictions in the cache, and how its judge is built. Evaluation asks
that object and never branches on a backend's name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping, Optional, Protocol, Sequence

from automon.errors import ConfigError
from automon.models.loading import API_MODEL
from automon.errors import UserError
from automon.models.loading import model_identity
from automon.prompts.templates import EVIDENCE_MAX_QUOTES


class JudgeError(UserError, RuntimeError):
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


# ---------------------------------------------------------------- configuration

@dataclass
class BackendConfig:
    """Fields every backend has. A backend subclasses it with its own fields and defaults, and is
    registered in automon.backends.BACKENDS; Hydra then rejects any key its schema lacks."""
    name: str = ""  # the backend= option; each subclass fixes it
    # Prompts handed to the backend per call; the prediction cache is flushed after each call,
    # so a killed run loses at most this many predictions per monitor.
    chunk_size: int = 512
    # Prompt + answer token budget. Longer monitored responses are shortened in the middle (head and
    # tail kept, marker in between) by the shared renderer, counted and reported. Null: no limit.
    # Only backends with a local tokenizer can measure (and so shorten).
    max_seq_length: Optional[int] = 32768
    # Tokens generated for the evidence prompt (the direct prompt reads one token).
    max_new_tokens: int = 256

    # Loads the model's weights and tokenizer here: prompts are rendered to text and measured locally.
    local_model: ClassVar[bool] = True
    # model= can be loaded on this machine (OOD detectors read its hidden states and logprobs, whatever
    # scores the prompts): every backend but one whose model sits behind an API.
    local_weights: ClassVar[bool] = True
    # An answer the prompt's parser cannot read counts as a failed request (not cached, retried, over
    # max_failed_share the evaluation is INCOMPLETE): a server answering the wrong thing, not the monitor.
    unparseable_fails: ClassVar[bool] = False
    # Set: the config defines its own monitors instead of the base model and the adapters of adapter= /
    # sweep_dir= (backend=probe: "probe", one probe per training subset; automon.monitors.DEFINED_BY_BACKEND).
    defines_monitors: ClassVar[Optional[str]] = None
    # Its judge can write answers (Judge.generate): what a policy model (the build's policy, the paraphrase
    # stress) needs; a backend that only scores cannot be one.
    generates: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ConfigError(f"backend.chunk_size={self.chunk_size} must be >= 1")
        if self.max_seq_length is not None and self.max_seq_length <= self.max_new_tokens + 64:
            raise ConfigError(f"backend.max_seq_length={self.max_seq_length} leaves no room for a prompt "
                              f"(backend.max_new_tokens={self.max_new_tokens})")

    def check_model(self, model: Any) -> None:
        """Refuse a model this backend cannot serve (called with the composed model config)."""
        if self.local_model and model.name == API_MODEL:
            raise ConfigError(f"model={API_MODEL} is the placeholder for backend=openai; pick a real model "
                              f"(e.g. model=qwen3_4b_instruct_2507) for backend={self.name}")

    def check_eval(self, c: Any) -> None:
        """Refuse an evaluation this backend cannot serve (c: the whole HoldoutConfig, checked at start-up)."""

    def model_label(self, model: Any) -> str:
        """The model's name in output directories and report titles."""
        return model.name

    def source_identity(self) -> dict[str, Any] | None:
        """Where the predictions come from when not from a model this config names (backend=inspect_log:
        the log's file, sha256, task and model): recorded in identity.json and metrics.json. None: a model."""
        return None

    def cache_identity(self, model: Any, prompt_kind: str, adapter: str | None) -> dict[str, Any]:
        """What decides this backend's predictions besides the prompt, the adapter's weights and the
        shots (which the evaluation adds for every backend). `adapter` is the name a request uses for
        the adapter (None: the base model). Two configs with equal identities share cached predictions."""
        raise NotImplementedError(f"{type(self).__name__} must say what identifies its predictions")

    def make_judge(self, model: Any, prompt_kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> "Judge":
        """The judge for one evaluation (heavy imports happen here, never at module import)."""
        raise NotImplementedError(f"{type(self).__name__} must build its judge")

    def generation_identity(self, prompt_kind: str) -> dict[str, Any]:
        """The generation budget, which changes an evidence answer (a direct answer reads one token),
        and how the answer is decoded where the backend records it (decoding_identity)."""
        out: dict[str, Any] = {"max_new_tokens": self.max_new_tokens} if prompt_kind == "evidence" else {}
        decoding = self.decoding_identity(prompt_kind)
        return {**out, "decoding": decoding} if decoding else out

    def decoding_identity(self, prompt_kind: str) -> dict[str, Any]:
        """How this backend constrains the answers of `prompt_kind`, where that changed after predictions
        and evaluations were recorded (hf: evidence answers constrained to evidence_regex). Empty: not
        recorded, so the identities recorded before stay what they were."""
        return {}


def local_weights_identity(model: Any) -> dict[str, Any]:
    """What identifies weights loaded on this machine: the hub id or directory and its revision; a
    built-in model (tiny, smollm2_135m_instruct) by its builder's version (its directory is a cache
    that is rebuilt)."""
    return {"model": model_identity(model.pretrained), "revision": model.revision}


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

    def pair(self, prompt_kind: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (self.yes, self.no) if prompt_kind == "direct" else (self.true, self.false)


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


def read_answer(text: str, content: Sequence[Any] | None, prompt_kind: str) -> JudgeResult:
    """A generated answer as a judge result: the text, and P(yes) (direct: at the first token) or P(true)
    (evidence: at the verdict token) when per-token log-probabilities came with it. `content`: the
    tokens in the OpenAI shape (each with .token, .logprob, .top_logprobs of .token/.logprob), as the
    OpenAI API and inspect_ai's ModelOutput both give them; None or empty when none came back."""
    content = content or []
    p = mass = None
    if content:
        if prompt_kind == "direct":
            k: int | None = 0
            pos, neg = "yes", "no"
        else:
            k = verdict_position([c.token for c in content])
            pos, neg = "true", "false"
        if k is not None:
            c = content[k]
            top = [(t.token, t.logprob) for t in (c.top_logprobs or [])]
            if not any(t == c.token for t, _ in top):
                top.append((c.token, c.logprob))
            p, mass = p_yes_from_text_logprobs(top, pos, neg)
    return JudgeResult(p_yes=p, mass=mass if p is not None else None, text=text)


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

    vLLM and the hf backend (automon.backends.constrained) constrain decoding with this; the OpenAI
    backend sends the schema itself (response_format=json_schema, strict), which an API enforces in its
    own spelling. The local backends use this rather than the JSON schema: the schema admits any
    whitespace between tokens, and a weak model decoding greedily then emits whitespace until
    max_new_tokens (seen with the tiny model: every answer unparseable). The regex admits only the
    trained answer format, in any tokenisation. The quotes' length is not bounded here: a bounded
    repetition ({0,400}) makes xgrammar 0.2.8 take 0.7-7 s per generated token inside a string;
    max_new_tokens bounds it instead.
    """
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
