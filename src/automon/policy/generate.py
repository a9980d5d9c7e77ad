"""Cached, resumable policy generation through a judge backend's `generate` capability.

The cache is the one the evaluation's scores use (automon.backends.cache: one append-only JSONL
file per identity, fsync'ed after every backend call, failed requests not cached). Its file key is
what decides an answer besides the prompt: the backend's cache identity for kind="generate" (model
weights / endpoint, dtype, device), the generation budget, the seed and the thinking flag; a line is
the sample id checked against the hash of the exact messages. A killed build loses at most one
chunk of answers; the next run asks the backend only for what is missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from automon.backends.base import JudgeRequest, JudgeResult
from automon.backends.cache import PredictionCache
from automon.prompts import prompt_text

log = logging.getLogger("automon.policy")
GEN_VERSION = "policy-gen-v1"  # bump when the request building changes (it changes the answers)


class Generator(Protocol):
    """What the policy needs of a backend's judge: greedy answers to rendered requests."""

    def generate(self, requests: Sequence[JudgeRequest], max_new_tokens: int) -> list[JudgeResult]: ...


@dataclass(frozen=True)
class Ask:
    """One prompt for the policy: `id` is unique per (item, with/without cue)."""
    id: str
    text: str  # the user turn, exactly the request the sample will carry


def messages_of(text: str) -> list[dict[str, str]]:
    # The request alone, no system prompt: the sample's `request` is exactly what the policy saw.
    return [{"role": "user", "content": text}]


def messages_sha(messages: list[dict[str, str]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


class PolicyAnswers:
    """Answers of one policy (one identity) to prompts, from the cache or the backend."""

    def __init__(self, generator: Generator, identity: dict[str, Any], cache_dir: str, *, max_new_tokens: int,
                 chunk_size: int, tokenizer: Any = None, enable_thinking: bool = False):
        self.generator = generator
        self.identity = {"gen_version": GEN_VERSION, **identity, "max_new_tokens": max_new_tokens,
                         "enable_thinking": enable_thinking}
        self.cache = PredictionCache(cache_dir, self.identity)
        self.max_new_tokens = max_new_tokens
        self.chunk_size = chunk_size
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        self.stats = {"cached": 0, "generated": 0, "errors": 0, "seconds": 0.0}

    def request(self, ask: Ask) -> JudgeRequest:
        msgs = messages_of(ask.text)
        prompt = None
        if self.tokenizer is not None:  # a local model: render with its chat template
            prompt = prompt_text(self.tokenizer, msgs, self.enable_thinking)
        return JudgeRequest(ask.id, msgs, prompt)

    def answer(self, asks: Sequence[Ask]) -> dict[str, JudgeResult]:
        """id -> result for every ask; results with `error` set were not cached (a rerun retries)."""
        out: dict[str, JudgeResult] = {}
        todo: list[tuple[Ask, str]] = []
        for a in asks:
            sha = messages_sha(messages_of(a.text))
            hit = self.cache.get(a.id, sha)
            if hit is not None:
                out[a.id] = hit
                self.stats["cached"] += 1
            else:
                todo.append((a, sha))
        if todo:
            log.info("policy: %d answers cached, %d to generate (cache %s)", len(out), len(todo), self.cache.path)
        for start in range(0, len(todo), self.chunk_size):
            chunk = todo[start:start + self.chunk_size]
            t0 = time.perf_counter()
            results = self.generator.generate([self.request(a) for a, _ in chunk], self.max_new_tokens)
            self.stats["seconds"] += time.perf_counter() - t0
            if len(results) != len(chunk):
                raise RuntimeError(f"the backend returned {len(results)} answers for {len(chunk)} prompts")
            self.cache.put_many((a.id, sha, r) for (a, sha), r in zip(chunk, results))
            for (a, _), r in zip(chunk, results):
                out[a.id] = r
                self.stats["generated" if r.error is None else "errors"] += 1
            log.info("policy: %d/%d generated (%.1f s)", min(start + self.chunk_size, len(todo)), len(todo),
                     self.stats["seconds"])
        return out
