"""OpenAI-compatible chat-completions judge: the OpenAI API, `vllm serve`, `transformers serve`, ...

- The key comes from the environment variable named by judge.api_key_env and lives only in the
  client object: it is never put in the config, cache, predictions, reports or log messages, and
  error texts are scrubbed of it before they are recorded.
- At most judge.concurrency requests are in flight; connection errors, timeouts, 408/409/429 and 5xx
  are retried with exponential backoff and jitter; other failures are recorded per sample (the run
  goes on), except bad credentials, which stop the run (every request would fail).
- P(yes) comes from top_logprobs when the server returns them; otherwise the text is parsed.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from typing import Any, Sequence

from automon.judges.base import (
    EVIDENCE_JSON_SCHEMA,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeTiming,
    LoraAdapter,
    p_yes_from_text_logprobs,
    verdict_position,
)

RETRY_STATUS = (408, 409, 429)
_KEYLIKE = re.compile(r"\b(sk|key|tok)-[A-Za-z0-9_\-*]{4,}")


def redact(text: str, secret: str | None) -> str:
    """Remove the key (and anything that looks like a masked key) from an error text."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)


def request_body(req: JudgeRequest, *, kind: str, model: str, judge_cfg: Any, max_new_tokens: int,
                 enable_thinking: bool) -> dict[str, Any]:
    """The keyword arguments of `client.chat.completions.create` for one request."""
    body: dict[str, Any] = {"model": model, "messages": req.messages, "temperature": 0.0,
                            "max_tokens": judge_cfg.direct_max_tokens if kind == "direct" else max_new_tokens}
    if judge_cfg.seed is not None:
        body["seed"] = judge_cfg.seed
    if judge_cfg.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = judge_cfg.top_logprobs
    if kind == "evidence" and judge_cfg.structured_output:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "monitor_verdict", "schema": EVIDENCE_JSON_SCHEMA, "strict": True}}
    extra = dict(judge_cfg.extra_body or {})
    if judge_cfg.send_chat_template_kwargs:
        extra["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
    if extra:
        body["extra_body"] = extra
    return body


def read_choice(choice: Any, kind: str) -> JudgeResult:
    """Text and (when logprobs came back) P(yes) / P(true) from one chat-completion choice."""
    text = (choice.message.content or "") if choice.message else ""
    content = getattr(getattr(choice, "logprobs", None), "content", None) or []
    p = mass = None
    if content:
        if kind == "direct":
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


class OpenAIJudge:
    name = "openai"

    def __init__(self, judge_cfg: Any, model_cfg: Any, backend_cfg: Any, kind: str,
                 adapters: Sequence[LoraAdapter], enable_thinking: bool):
        try:
            import openai
        except ImportError as e:
            raise JudgeError("backend=openai needs the openai package: pip install 'automon[api]'") from e
        self._openai = openai
        self.cfg = judge_cfg
        self.kind = kind
        self.max_new_tokens = backend_cfg.max_new_tokens
        self.enable_thinking = enable_thinking
        self.timing = JudgeTiming()
        base = judge_cfg.model_name or model_cfg.pretrained
        # With `vllm serve --lora-modules NAME=PATH` an adapter is addressed by its name.
        self.model_for: dict[str | None, str] = {None: base, **{a.name: a.name for a in adapters}}
        key = os.environ.get(judge_cfg.api_key_env)
        if not key:
            if judge_cfg.base_url is None:
                raise JudgeError(f"backend=openai: the environment variable {judge_cfg.api_key_env} is not "
                                 "set. Export your key there (never put it in a config file), or point "
                                 "judge.base_url at a server that needs none, or name another variable "
                                 "with judge.api_key_env=...")
            key = "EMPTY"  # a local server without authentication
        self._key = key

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIJudge(base_url={self.cfg.base_url!r}, model={self.model_for[None]!r})"

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        t0 = time.perf_counter()
        try:
            return asyncio.run(self._score_all(requests))
        finally:
            self.timing.model_s += time.perf_counter() - t0

    def close(self) -> None:
        pass

    async def _score_all(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        client = self._openai.AsyncOpenAI(api_key=self._key, base_url=self.cfg.base_url,
                                          timeout=self.cfg.timeout_s, max_retries=0)
        sem = asyncio.Semaphore(self.cfg.concurrency)
        try:
            return list(await asyncio.gather(*(self._one(client, sem, r) for r in requests)))
        finally:
            await client.close()

    async def _one(self, client: Any, sem: asyncio.Semaphore, req: JudgeRequest) -> JudgeResult:
        oa = self._openai
        body = request_body(req, kind=self.kind, model=self.model_for[req.adapter], judge_cfg=self.cfg,
                            max_new_tokens=self.max_new_tokens, enable_thinking=self.enable_thinking)
        delay = self.cfg.backoff_s
        for attempt in range(self.cfg.max_retries + 1):
            try:
                async with sem:
                    resp = await client.chat.completions.create(**body)
                if not resp.choices:
                    return JudgeResult(error="the server returned no choices")
                return read_choice(resp.choices[0], self.kind)
            except (oa.AuthenticationError, oa.PermissionDeniedError) as e:
                raise JudgeError(f"the server at {self.cfg.base_url or 'api.openai.com'} refused the "
                                 f"credentials from ${self.cfg.api_key_env}: "
                                 f"{redact(str(e), self._key)}") from None
            except oa.APIStatusError as e:
                retry = e.status_code in RETRY_STATUS or e.status_code >= 500
                err = f"HTTP {e.status_code}: {redact(str(e), self._key)}"
            except (oa.APIConnectionError, oa.APITimeoutError) as e:
                retry, err = True, f"{type(e).__name__}: {redact(str(e), self._key)}"
            except Exception as e:  # noqa: BLE001 - one bad answer must not end the run
                retry, err = False, f"{type(e).__name__}: {redact(str(e), self._key)}"
            if not retry or attempt == self.cfg.max_retries:
                tries = attempt + 1
                return JudgeResult(error=f"{err} (after {tries} attempt{'s' if tries > 1 else ''})")
            await asyncio.sleep(min(delay, 60.0) * (0.5 + random.random()))
            delay *= 2
        return JudgeResult(error="unreachable")
