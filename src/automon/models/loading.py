"""Resolve and load the monitor's base model and tokenizer (shared by training and evaluation)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from automon.models.smollm2 import SMOLLM2_VERSION, smollm2_path
from automon.models.tiny import TINY_VERSION, tiny_qwen3_path

# model=api (conf/model/api.yaml): no local weights, the model sits behind an OpenAI-compatible API.
API_MODEL = "api"


class ModelLoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class BuiltModel:
    """A model automon builds offline on first use and caches under $AUTOMON_CACHE/models."""
    build: Callable[[], Path]      # -> its cached directory
    version: Callable[[], str]     # the version of what `build` makes (part of every cache key)
    random_weights: bool           # reports say so: its predictions measure the machinery, not a monitor


# Built-in models by the name given as model.pretrained.
BUILT_MODELS: dict[str, BuiltModel] = {
    "tiny": BuiltModel(tiny_qwen3_path, lambda: TINY_VERSION, random_weights=True),  # random tiny Qwen3
    "smollm2_135m_instruct": BuiltModel(smollm2_path, lambda: SMOLLM2_VERSION, random_weights=False),  # from a GGUF
}


def has_random_weights(pretrained: str) -> bool:
    built = BUILT_MODELS.get(str(pretrained))
    return built is not None and built.random_weights


def resolve_model_path(model_cfg: Any) -> str:
    """A built-in name (BUILT_MODELS) -> its cached directory (built on first use); otherwise the hub
    id or local directory as given."""
    built = BUILT_MODELS.get(str(model_cfg.pretrained))
    if built is not None:
        return str(built.build())
    return str(model_cfg.pretrained)


def model_identity(pretrained: str) -> str:
    """What identifies the weights in caches: a built-in model's name and version, else the id/path."""
    built = BUILT_MODELS.get(str(pretrained))
    return f"{pretrained}:{built.version()}" if built is not None else str(pretrained)


def load_tokenizer(model_cfg: Any):
    from transformers import AutoTokenizer

    path = resolve_model_path(model_cfg)
    try:
        tok = AutoTokenizer.from_pretrained(path, revision=getattr(model_cfg, "revision", None))
    except Exception as e:  # noqa: BLE001 - re-raised with what to do
        raise ModelLoadError(_offline_hint(path, e)) from e
    # A model directory without its tokenizer files loads as an empty tokenizer (one token, no chat
    # template), which failed later with a traceback while rendering prompts.
    if len(tok) < 2 or not getattr(tok, "chat_template", None):
        lack = "tokenizer files (tokenizer.json, tokenizer_config.json)" if len(tok) < 2 else "a chat template"
        raise ModelLoadError(f"model directory {path} has no {lack}: it is not a complete Hugging Face chat "
                             "model directory; copy the tokenizer files (and chat_template.jinja) from the "
                             "model's origin into it, or point model.pretrained= at a complete copy")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def shared_tokenizer(model_cfg: Any, *, left_truncating: bool = False):
    """The model's tokenizer for readers that never change it (rendering prompts, feature encoders):
    loaded once per process per model, revision and truncation side, and shared. A load costs seconds
    (transformers parses the 18 MB tokenizer.json of Qwen3, the tiny model's too, more than once), and one
    OOD evaluation asked for it five times. `left_truncating`: truncation from the left, padding on the
    right (a long text keeps its end). A local directory's tokenizer files are part of the key, so a
    changed directory is loaded again. Whoever must set an attribute loads its own (load_tokenizer)."""
    path = resolve_model_path(model_cfg)
    revision = getattr(model_cfg, "revision", None)
    return _shared_tokenizer(path, revision, left_truncating, _tokenizer_files(path))


def _tokenizer_files(path: str) -> tuple:
    """(name, size, mtime) of a local model directory's tokenizer files; () for a hub id."""
    d = Path(path)
    if not d.is_dir():
        return ()
    return tuple((f.name, st.st_size, st.st_mtime_ns) for f in sorted(d.glob("*token*")) + sorted(d.glob("*.jinja"))
                 for st in [f.stat()])


@lru_cache(maxsize=8)
def _shared_tokenizer(path: str, revision: str | None, left_truncating: bool, files: tuple):
    tok = load_tokenizer(SimpleNamespace(pretrained=path, revision=revision))
    return make_left_truncating(tok) if left_truncating else tok


def make_left_truncating(tok: Any) -> Any:
    """`tok` truncating from the left and padding on the right (a long text keeps its end); a pad token
    where it has none."""
    tok.truncation_side = "left"
    tok.padding_side = "right"
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
