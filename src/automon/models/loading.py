"""Resolve and load the monitor's base model and tokenizer (shared by training and evaluation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ModelLoadError(RuntimeError):
    pass


def resolve_model_path(model_cfg: Any) -> str:
    """`tiny` -> the cached tiny Qwen3 directory (built on first use); otherwise hub id or local dir."""
    if model_cfg.pretrained == "tiny":
        from automon.models.tiny import tiny_qwen3_path

        return str(tiny_qwen3_path())
    return str(model_cfg.pretrained)


def load_tokenizer(model_cfg: Any):
    from transformers import AutoTokenizer

    path = resolve_model_path(model_cfg)
    try:
        tok = AutoTokenizer.from_pretrained(path, revision=getattr(model_cfg, "revision", None))
    except Exception as e:  # noqa: BLE001 - re-raised with what to do
        raise ModelLoadError(_offline_hint(path, e)) from e
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _offline_hint(path: str, err: Exception) -> str:
    local = Path(path).exists()
    return (f"could not load model/tokenizer {path!r}: {type(err).__name__}: {err}\n"
            + ("The directory exists but is not a complete Hugging Face model directory."
               if local else
               "It is not a local directory, so it must come from the Hugging Face hub. Offline "
               "(HF_HUB_OFFLINE=1 or no network) it must already be in the HF cache: run "
               f"`huggingface-cli download {path}` on a machine with network, or pass "
               "model.pretrained=/path/to/local/dir, or use model=tiny for a CPU smoke run."))
