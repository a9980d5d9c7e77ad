"""OpenAI-compatible chat-completions judge: the OpenAI API, `vllm serve`, `transformers serve`, ...

- The key comes from the environment variable named by backend.api_key_env and lives only in the
  client object: it is never put in the config, cache, predictions, reports or log messages, and
  error texts are scrubbed of it before they are recorded.
- At most backend.concurrency requests are in flight; connection errors, timeouts, 408/409/429 and
  5xx are retried with exponential backoff and jitter; other failures are recorded per sample (the
  run goes on), except bad credentials, which stop the run (every request would fail).
- The first request goes alone, with at most PROBE_RETRIES retries: a server that cannot be reached
  (connection refused, unknown host) stops the run in seconds instead of failing every request
  after its full backoff.
- P(yes) comes from top_logprobs when the server returns them; otherwise the text is parsed.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Optional, Sequence

from automon.errors import ConfigError
from automon.models.loading import API_MODEL
from automon.backends.base import (
    EVIDENCE_JSON_SCHEMA,
    BackendConfig,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeTiming,
    LoraAdapter,
    read_answer,
)


@dataclass
class OpenAIConfig(BackendConfig):
    """backend=openai (conf/backend/openai.yaml): any OpenAI-compatible chat-completions server."""
    name: str = "openai"
    chunk_size: int = 64
    max_seq_length: Optional[int] = None  # no local tokenizer: responses are sent whole
    max_new_tokens: int = 512             # evidence prompt only
    # Model id sent with each request. Null: model.pretrained (e.g. for `vllm serve <model>`).
    # With a LoRA served by `vllm serve --lora-modules NAME=PATH`, requests for an adapter use the
    # adapter's run name (its directory name) as the model id.
    model_name: Optional[str] = None
    base_url: Optional[str] = None  # null: the official OpenAI endpoint
    # NAME of the environment variable that holds the key. The key itself never enters the config,
    # the cache, any output file or any log. Loopback servers without auth need no key.
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8          # requests in flight at once
    max_retries: int = 5          # for connection errors, timeouts, 429 and 5xx (not for 4xx)
    backoff_s: float = 1.0        # first retry delay; doubles each retry (with jitter), capped at 60 s
    timeout_s: float = 120.0
    # Ask for top_logprobs to read P(yes). Servers that ignore it (transformers serve) fall back to
    # parsing the text answer (p_yes null then).
    logprobs: bool = True
    top_logprobs: int = 20
    direct_max_tokens: int = 4    # enough to read "yes"/"no" from the text when no logprobs come back
    # Evidence prompt: send response_format=json_schema (structured output).
    structured_output: bool = True
    # Send chat_template_kwargs={"enable_thinking": model.enable_thinking} (vllm serve and transformers
    # serve understand it; the official OpenAI API rejects unknown fields, so keep false there).
    send_chat_template_kwargs: bool = False
    extra_body: Dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = 0

    local_model: ClassVar[bool] = False
    local_weights: ClassVar[bool] = False
    generates: ClassVar[bool] = True
    # A server that answers text the prompt cannot read (another model than asked for, an error page
    # with HTTP 200, a refusal) is failing, not monitoring: such answers are not cached (docs/errors.md).
    unparseable_fails: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.concurrency < 1 or self.max_retries < 0:
            raise ConfigError("backend.concurrency must be >= 1 and backend.max_retries >= 0")

    def check_model(self, model: Any) -> None:
        if model.name == API_MODEL and not self.model_name:
            raise ConfigError(f"backend=openai model={API_MODEL} needs backend.model_name=<the server's model "
                              "id>, e.g. backend.model_name=gpt-4o-mini")

    def served_model(self, model: Any) -> str:
        """The model id the server is asked for (the base model's; adapters go by their own name)."""
        return self.model_name or model.pretrained

    def model_label(self, model: Any) -> str:
        return f"api-{self.served_model(model)}" if model.name == API_MODEL else model.name

    def cache_identity(self, model: Any, prompt_kind: str, adapter: str | None) -> dict[str, Any]:
        # The server's weights are out of reach: the endpoint and the model id stand for them.
        return {"model": self.served_model(model), "revision": model.revision, "base_url": self.base_url,
                "logprobs": self.logprobs,
                "structured_output": self.structured_output if prompt_kind == "evidence" else None,
                "request_model": adapter, **self.generation_identity(prompt_kind)}

    def make_judge(self, model: Any, prompt_kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> "OpenAIJudge":
        return OpenAIJudge(self, model, prompt_kind, adapters)


RETRY_STATUS = (408, 409, 429)
PROBE_RETRIES = 2  # retries of the first request when the server cannot be reached (~3 s of backoff)
_KEYLIKE = re.compile(r"\b(sk|key|tok)-[A-Za-z0-9_\-*]{4,}")


def redact(text: str, secret: str | None) -> str:
    """Remove the key (and anything that looks like a masked key) from an error text."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)


def request_body(req: JudgeRequest, *, prompt_kind: str, model: str, cfg: OpenAIConfig,
                 enable_thinking: bool, max_tokens: int | None = None) -> dict[str, Any]:
    """The keyword arguments of `client.chat.completions.create` for one request. prompt_kind="generate":
    a plain greedy answer of at most `max_tokens` tokens (the policy generator), no log-probabilities."""
    if max_tokens is None:
        max_tokens = cfg.direct_max_tokens if prompt_kind == "direct" else cfg.max_new_tokens
    body: dict[str, Any] = {"model": model, "messages": req.messages, "temperature": 0.0, "max_tokens": max_tokens}
    if cfg.seed is not None:
        body["seed"] = cfg.seed
    if cfg.logprobs and prompt_kind != "generate":
        body["logprobs"] = True
        body["top_logprobs"] = cfg.top_logprobs
    if prompt_kind == "evidence" and cfg.structured_output:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "monitor_verdict", "schema": EVIDENCE_JSON_SCHEMA, "strict": True}}
    extra = dict(cfg.extra_body or {})
    if cfg.send_chat_template_kwargs:
        extra["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
    if extra:
        body["extra_body"] = extra
    return body


def read_choice(choice: Any, prompt_kind: str) -> JudgeResult:
    """Text and (when logprobs came back) P(yes) / P(true) from one chat-completion choice."""
    text = (choice.message.content or "") if choice.message else ""
    return read_answer(text, getattr(getattr(choice, "logprobs", None), "content", None), prompt_kind)


class OpenAIJudge:
    name = "openai"

    def __init__(self, cfg: OpenAIConfig, model_cfg: Any, prompt_kind: str, adapters: Sequence[LoraAdapter]):
        try:
            import openai
        except ImportError as e:
            raise JudgeError("backend=openai needs the openai package: pip install 'automon[api]'") from e
        self._openai = openai
        self.cfg = cfg
        self.prompt_kind = prompt_kind
        self.enable_thinking = model_cfg.enable_thinking
        self.timing = JudgeTiming()
        # With `vllm serve --lora-modules NAME=PATH` an adapter is addressed by its name.
        self.model_for: dict[str | None, str] = {None: cfg.served_model(model_cfg),
                                                 **{a.name: a.name for a in adapters}}
        key = os.environ.get(cfg.api_key_env)
        if not key:
            if cfg.base_url is None:
                raise JudgeError(f"backend=openai: the environment variable {cfg.api_key_env} is not "
                                 "set. Export your key there (never put it in a config file), or point "
                                 "backend.base_url at a server that needs none, or name another variable "
                                 "with backend.api_key_env=...")
            key = "EMPTY"  # a local server without authentication
        self._key = key
        self._reached = False  # set once one request got an answer from the server
        self._max_tokens: int | None = None  # set by generate()

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIJudge(base_url={self.cfg.base_url!r}, model={self.model_for[None]!r})"

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        t0 = time.perf_counter()
        try:
            if not self._reached and requests:
                first = asyncio.run(self._score_all(requests[:1], probe=True))
                self._reached = True
                return first + (asyncio.run(self._score_all(requests[1:])) if len(requests) > 1 else [])
            return asyncio.run(self._score_all(requests))
        finally:
            self.timing.model_s += time.perf_counter() - t0

    def generate(self, requests: Sequence[JudgeRequest], max_new_tokens: int) -> list[JudgeResult]:
        """Greedy (temperature 0, backend.seed) answers to chat messages: the policy generator."""
        prompt_kind, self.prompt_kind, self._max_tokens = self.prompt_kind, "generate", max_new_tokens
        try:
            return self.score(requests)
        finally:
            self.prompt_kind, self._max_tokens = prompt_kind, None

    def close(self) -> None:
        pass

    async def _score_all(self, requests: Sequence[JudgeRequest], probe: bool = False) -> list[JudgeResult]:
        client = self._openai.AsyncOpenAI(api_key=self._key, base_url=self.cfg.base_url,
                                          timeout=self.cfg.timeout_s, max_retries=0)
        sem = asyncio.Semaphore(self.cfg.concurrency)
        try:
            return list(await asyncio.gather(*(self._one(client, sem, r, probe) for r in requests)))
        finally:
            await client.close()

    async def _one(self, client: Any, sem: asyncio.Semaphore, req: JudgeRequest, probe: bool = False) -> JudgeResult:
        oa = self._openai
        body = request_body(req, prompt_kind=self.prompt_kind, model=self.model_for[req.adapter], cfg=self.cfg,
                            enable_thinking=self.enable_thinking, max_tokens=self._max_tokens)
        delay = self.cfg.backoff_s
        retries = min(self.cfg.max_retries, PROBE_RETRIES) if probe else self.cfg.max_retries
        for attempt in range(retries + 1):
            try:
                async with sem:
                    resp = await client.chat.completions.create(**body)
                if not resp.choices:
                    return JudgeResult(error="the server returned no choices")
                return read_choice(resp.choices[0], self.prompt_kind)
            except (oa.AuthenticationError, oa.PermissionDeniedError) as e:
                raise JudgeError(f"the server at {self.cfg.base_url or 'api.openai.com'} refused the "
                                 f"credentials from ${self.cfg.api_key_env}: "
                                 f"{redact(str(e), self._key)}") from None
            except oa.APIStatusError as e:
                retry = e.status_code in RETRY_STATUS or e.status_code >= 500
                err = f"HTTP {e.status_code}: {redact(str(e), self._key)}"
            except (oa.APIConnectionError, oa.APITimeoutError) as e:
                retry, err = True, f"{type(e).__name__}: {redact(str(e), self._key)}"
                unreachable = not isinstance(e, oa.APITimeoutError)  # a slow server is not a missing one
                if probe and unreachable and attempt == retries:
                    cause = e.__cause__ or e
                    raise JudgeError(
                        f"cannot reach the server at {self.cfg.base_url or 'api.openai.com'} "
                        f"({type(cause).__name__}: {redact(str(cause), self._key)}; {attempt + 1} attempts)",
                        "backend.base_url", "start the server, or fix backend.base_url") from None
            except Exception as e:  # noqa: BLE001 - one bad answer must not end the run
                retry, err = False, f"{type(e).__name__}: {redact(str(e), self._key)}"
            if not retry or attempt == retries:
                tries = attempt + 1
                return JudgeResult(error=f"{err} (after {tries} attempt{'s' if tries > 1 else ''})")
            await asyncio.sleep(min(delay, 60.0) * (0.5 + random.random()))
            delay *= 2
        return JudgeResult(error="unreachable")
