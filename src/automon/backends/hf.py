"""transformers + PEFT judge: batched, left-padded, CPU-capable (the test and CPU-smoke backend).

Direct prompt: one forward pass per batch with logits for the last position only; P(yes) from the
yes/no variant ids (shared/docs/apis.md s3). Evidence prompt: greedy generation constrained to the
evidence format (automon.backends.constrained: the regex the vLLM backend constrains with), so every
answer parses; P(true) is read at the verdict token from the model's own log-probabilities, recorded
during generation before the format's mask (as the vLLM backend reads them, unconstrained).
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence

from automon.errors import ConfigError
from automon.backends.base import (
    AnswerTokens,
    BackendConfig,
    JudgeError,
    JudgeRequest,
    JudgeResult,
    JudgeTiming,
    LoraAdapter,
    local_weights_identity,
    verdict_position,
)
from automon.backends.constrained import FormatGuide, decoding_identity, guide_tokenizer
from automon.models.loading import ModelLoadError, resolve_model_path


@dataclass
class HFConfig(BackendConfig):
    """backend=hf (conf/backend/hf.yaml): transformers + PEFT on CPU or one GPU."""
    name: str = "hf"
    chunk_size: int = 256
    batch_size: int = 16          # prompts per forward pass (sorted by length, left-padded)
    max_batch_tokens: int = 65536  # cap on padded tokens per forward pass (memory)
    device: str = "auto"          # auto | cpu | cuda | cuda:<n>
    dtype: Optional[str] = None   # null: model.dtype (bfloat16 becomes float32 on CPU)

    generates: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1 or self.max_batch_tokens < 1:
            raise ConfigError("backend.batch_size and backend.max_batch_tokens must be >= 1")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise ConfigError(f"backend.device={self.device!r}; choose auto, cpu, cuda or cuda:<n>")

    def cache_identity(self, model: Any, prompt_kind: str, adapter: str | None) -> dict[str, Any]:
        # The device matters: CPU and CUDA kernels (and dtypes) give slightly different P(yes).
        return {**local_weights_identity(model), "dtype": self.dtype or model.dtype,
                "device": resolve_device(self.device), **self.generation_identity(prompt_kind)}

    def decoding_identity(self, prompt_kind: str) -> dict[str, Any]:
        return decoding_identity() if prompt_kind == "evidence" else {}

    def make_judge(self, model: Any, prompt_kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> "HFJudge":
        check_device(self.device)
        return HFJudge(model, self, prompt_kind, adapters, tokenizer)


def check_device(device: str) -> None:
    """A CUDA device this machine lacks: one JudgeError before the weights load (an AssertionError inside
    torch once they had). Not a config check: a GPU run's config stays composable, and its status
    checkable, on a CPU machine."""
    if not device.startswith("cuda"):
        return
    import torch

    index, have = int(device.partition(":")[2] or 0), torch.cuda.device_count()
    if index >= have:
        raise JudgeError(f"backend.device={device} needs CUDA GPU {index}, and this machine has {have}",
                         "backend.device", "use backend.device=auto or backend.device=cpu")


def _by_adapter(requests: Sequence[JudgeRequest]) -> dict[str | None, list[int]]:
    """Request indices grouped by adapter (each group is run with its adapter switched on once)."""
    groups: dict[str | None, list[int]] = {}
    for i, r in enumerate(requests):
        if r.prompt is None:
            raise ValueError(f"request {r.id} has no rendered prompt; the hf backend needs prompt_text")
        groups.setdefault(r.adapter, []).append(i)
    return groups


def resolve_device(device: str) -> str:
    """`auto` -> cuda when a GPU is visible, else cpu."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def plan_batches(lengths: Sequence[int], batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """Group request indices into batches of similar length (longest first).

    A batch holds at most `batch_size` prompts and at most `max_batch_tokens` padded tokens
    (rows x longest row); a prompt longer than the budget gets a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        longest = lengths[cur[0]] if cur else lengths[i]
        if cur and (len(cur) >= batch_size or (len(cur) + 1) * longest > max_batch_tokens):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


class _VerdictRecorder:
    """A logits processor that keeps the log-probabilities of a few ids at every generated step."""

    def __init__(self, ids: Sequence[int]):
        self.ids = list(ids)
        self.steps: list[Any] = []

    def __call__(self, input_ids, scores):
        import torch

        if self.ids:
            self.steps.append(torch.log_softmax(scores.float(), -1)[:, self.ids].cpu())
        return scores


class HFJudge:
    name = "hf"

    def __init__(self, model_cfg: Any, backend_cfg: HFConfig, prompt_kind: str, adapters: Sequence[LoraAdapter],
                 tokenizer: Any):
        import torch
        from transformers import AutoModelForCausalLM

        self.prompt_kind = prompt_kind
        self.cfg = backend_cfg
        self.tokenizer = tokenizer
        self.tokens = AnswerTokens.from_tokenizer(tokenizer)
        self.timing = JudgeTiming()
        self.device = torch.device(resolve_device(backend_cfg.device))
        dtype_name = backend_cfg.dtype or model_cfg.dtype
        if dtype_name in ("bfloat16", "float16") and self.device.type == "cpu":
            dtype_name = "float32"  # half-precision matmuls are slow or missing on most CPUs
        dtype = "auto" if dtype_name == "auto" else getattr(torch, dtype_name)
        path = resolve_model_path(model_cfg)
        try:
            model = AutoModelForCausalLM.from_pretrained(path, revision=model_cfg.revision, dtype=dtype)
        except Exception as e:  # noqa: BLE001 - re-raised with what to do
            raise ModelLoadError(f"could not load model {path!r} for the hf backend: {type(e).__name__}: {e}") from e
        # PEFT adapter names become module keys: use safe internal names.
        self._peft_names = {a.name: f"adapter{i}" for i, a in enumerate(adapters)}
        if adapters:
            from peft import PeftModel

            first = adapters[0]
            model = PeftModel.from_pretrained(model, first.path, adapter_name=self._peft_names[first.name])
            for a in adapters[1:]:
                model.load_adapter(a.path, adapter_name=self._peft_names[a.name])
        self.model = model.to(self.device).eval()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = sorted({i for i in (tokenizer.eos_token_id,
                                           tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                           tokenizer.convert_tokens_to_ids("<|endoftext|>"))
                               if isinstance(i, int) and i >= 0})
        # Evidence answers are constrained to the format; llguidance's view of the tokenizer is built once.
        self._guide_tokenizer = guide_tokenizer(tokenizer, self.eos_ids) if prompt_kind == "evidence" else None

    # ------------------------------------------------------------ public

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        results: list[JudgeResult | None] = [None] * len(requests)
        groups = _by_adapter(requests)
        ids = self._token_ids(requests)
        for adapter, idx in groups.items():
            with self._use_adapter(adapter):
                for i, res in zip(idx, self._score_ids([ids[i] for i in idx])):
                    results[i] = res
        return results  # type: ignore[return-value]

    def generate(self, requests: Sequence[JudgeRequest], max_new_tokens: int) -> list[JudgeResult]:
        """Greedy answers to rendered prompts (the policy generator): batched and left-padded as
        scoring is, stopping at the chat template's end tokens; `text` is the answer alone."""
        results: list[JudgeResult | None] = [None] * len(requests)
        groups = _by_adapter(requests)
        ids = self._token_ids(requests)
        for adapter, idx in groups.items():
            with self._use_adapter(adapter):
                for batch in plan_batches([len(ids[i]) for i in idx], self.cfg.batch_size, self.cfg.max_batch_tokens):
                    for j, text in zip(batch, self._greedy([ids[idx[j]] for j in batch], max_new_tokens)):
                        results[idx[j]] = JudgeResult(text=text)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        self.model = None

    # ------------------------------------------------------------ internals

    def _use_adapter(self, adapter: str | None):
        peft = hasattr(self.model, "disable_adapter")
        if adapter is None:
            return self.model.disable_adapter() if peft else nullcontext()
        if adapter not in self._peft_names:
            raise KeyError(f"adapter {adapter!r} was not loaded into the hf judge")
        self.model.set_adapter(self._peft_names[adapter])
        return nullcontext()

    def _token_ids(self, requests: Sequence[JudgeRequest]) -> list[list[int]]:
        """Each request's prompt as token ids. A text is tokenised once however many requests carry it:
        in a matrix the base model and every adapter are asked the same prompts (8 times the same
        3,010 texts for base + 7 adapters)."""
        t0 = time.perf_counter()
        unique = list(dict.fromkeys(r.prompt for r in requests))
        of = dict(zip(unique, self.tokenizer(unique, add_special_tokens=False)["input_ids"]))
        ids = [of[r.prompt] for r in requests]
        self.timing.tokenize_s += time.perf_counter() - t0
        self.timing.prompt_tokens += sum(len(x) for x in ids)
        return ids

    def _score_ids(self, ids: list[list[int]]) -> list[JudgeResult]:
        out: list[JudgeResult | None] = [None] * len(ids)
        for batch in plan_batches([len(x) for x in ids], self.cfg.batch_size, self.cfg.max_batch_tokens):
            rows = [ids[i] for i in batch]
            fn = self._direct if self.prompt_kind == "direct" else self._evidence
            for i, res in zip(batch, fn(rows)):
                out[i] = res
        return out  # type: ignore[return-value]

    def _pad(self, rows: list[list[int]]):
        import torch

        n = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), n), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), n), dtype=torch.long)
        for j, r in enumerate(rows):  # left padding: position -1 is every prompt's last token
            input_ids[j, n - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[j, n - len(r):] = 1
        return input_ids.to(self.device), mask.to(self.device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize()

    def _direct(self, rows: list[list[int]]) -> list[JudgeResult]:
        import torch

        input_ids, mask = self._pad(rows)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        t0 = time.perf_counter()
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=pos,
                                use_cache=False, logits_to_keep=1).logits[:, -1, :]
            lp = torch.log_softmax(logits.float(), -1)
            yes = lp[:, list(self.tokens.yes)].exp().sum(-1)
            no = lp[:, list(self.tokens.no)].exp().sum(-1)
            top = lp.argmax(-1)
        self._sync()
        self.timing.model_s += time.perf_counter() - t0
        res = []
        for py, pn, t in zip(yes.tolist(), no.tolist(), top.tolist()):
            mass = py + pn
            res.append(JudgeResult(p_yes=(py / mass) if mass > 0 else None, mass=mass,
                                   text=self.tokenizer.decode([t])))
        return res

    def _greedy(self, rows: list[list[int]], max_new_tokens: int) -> list[str]:
        import torch
        from transformers import GenerationConfig

        input_ids, mask = self._pad(rows)
        gc = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=self.eos_ids,
                              pad_token_id=self.pad_id)
        t0 = time.perf_counter()
        with torch.inference_mode():
            gen = self.model.generate(input_ids=input_ids, attention_mask=mask, generation_config=gc)
        self._sync()
        self.timing.model_s += time.perf_counter() - t0
        out = []
        for toks in gen[:, input_ids.shape[1]:].tolist():
            cut = next((k for k, t in enumerate(toks) if t in self.eos_ids), len(toks))
            out.append(self.tokenizer.decode(toks[:cut], skip_special_tokens=True))
        return out

    def _evidence(self, rows: list[list[int]]) -> list[JudgeResult]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        input_ids, mask = self._pad(rows)
        pos_ids, neg_ids = self.tokens.pair("evidence")
        rec = _VerdictRecorder([*pos_ids, *neg_ids])
        # The recorder comes first: it reads the model's own distribution, before the format's mask.
        guide = FormatGuide(self._guide_tokenizer, self.tokenizer, len(rows), self.cfg.max_new_tokens, self.eos_ids)
        gc = GenerationConfig(max_new_tokens=self.cfg.max_new_tokens, do_sample=False,
                              eos_token_id=self.eos_ids, pad_token_id=self.pad_id)
        t0 = time.perf_counter()
        with torch.inference_mode():
            gen = self.model.generate(input_ids=input_ids, attention_mask=mask, generation_config=gc,
                                      logits_processor=LogitsProcessorList([rec, guide]))
        self._sync()
        self.timing.model_s += time.perf_counter() - t0
        new = gen[:, input_ids.shape[1]:].tolist()
        res = []
        npos = len(pos_ids)
        for j, toks in enumerate(new):
            cut = next((k for k, t in enumerate(toks) if t in self.eos_ids), len(toks))
            toks = toks[:cut]
            p_yes = mass = None
            k = verdict_position([self.tokenizer.decode([t]) for t in toks])
            if k is not None and k < len(rec.steps):
                v = rec.steps[k][j].exp()
                py, pn = float(v[:npos].sum()), float(v[npos:].sum())
                mass = py + pn
                p_yes = py / mass if mass > 0 else None
            res.append(JudgeResult(p_yes=p_yes, mass=mass, text=self.tokenizer.decode(toks, skip_special_tokens=True)))
        return res
