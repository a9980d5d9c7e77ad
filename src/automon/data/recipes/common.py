"""Small deterministic helpers shared by the recipes."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Sequence, TypeVar

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")
_WS = re.compile(r"\s+")


def norm_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


def sentence(text: str) -> str:
    """`text` with normalised whitespace, ending in a full stop unless it ends in one of .!?"""
    text = norm_ws(text)
    return text if text[-1:] in ".!?" else text + "."


def with_opener(opener: str | None, claim: str) -> tuple[str, list[str]]:
    """Response text and the evidence quote (the claim sentence, with its opener when present)."""
    if opener:
        return f"{opener} {claim}", [f"{opener} {claim}"]
    return claim, [claim]


def plain(node: Any) -> Any:
    """A config node as plain Python (its dataclass, lists, dicts). The recipes read their settings in
    their inner loops, where OmegaConf's attribute access took half of syco_qa's time."""
    return OmegaConf.to_object(node) if isinstance(node, DictConfig) else node


def short_hash(*parts: object, n: int = 12) -> str:
    return hashlib.sha1("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest()[:n]


def text_key(prefix: str, text: str) -> str:
    """A source-item key from normalised text: the same question in two files gets one key."""
    return f"{prefix}:{short_hash(norm_ws(text).lower())}"


def choose(options: Sequence[T], *parts: object) -> T:
    """Deterministic choice keyed by `parts` (seed, item key, purpose): stable across runs and
    independent of iteration order, unlike a shared RNG stream."""
    if not options:
        raise ValueError(f"nothing to choose from for {parts}")
    h = int(hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest(), 16)
    return options[h % len(options)]


def rotate(options: Sequence[T], k: int, *parts: object) -> list[T]:
    """k distinct options in a deterministic order keyed by `parts` (k clipped to len(options))."""
    start = int(hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest(), 16) % len(options)
    return [options[(start + i) % len(options)] for i in range(min(k, len(options)))]


def coin(p: float, *parts: object) -> bool:
    h = int(hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest()[:8], 16)
    return h / 0xFFFFFFFF < p


_OPT = re.compile(r"\(([A-H])\)\s*(.+?)(?=\s*\([A-H]\)\s|\s*$)", re.S)
_OPT_PAREN = re.compile(r"(?m)^\s*\(?([A-H])\)\s*(.+?)\s*$")


def parse_options(text: str) -> dict[str, str]:
    """Option letter -> text for '(A) foo (B) bar' or one-per-line 'A) foo' layouts."""
    opts = {m.group(1): norm_ws(m.group(2)) for m in _OPT_PAREN.finditer(text)}
    if len(opts) >= 2:
        return opts
    return {m.group(1): norm_ws(m.group(2)) for m in _OPT.finditer(text)}
