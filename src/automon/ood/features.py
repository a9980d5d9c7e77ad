"""What the detectors read, cached on disk by (model, adapter, sample id) like the probes' features.

`pooled_hidden_states` is the seam for the distance detectors: the monitor's own model (its LoRA
adapter applied when it has one) read over the probe text (automon.probes.features.probe_text),
pooled at one layer; it reuses the probes' FeatureCache and pooling, adding the adapter to the
identity. `response_perplexities` caches the base model's log-perplexity of each response
(automon.ood.detectors.response_nll) as a one-column feature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from automon.models.loading import model_identity, resolve_model_path, shared_tokenizer
from automon.ood.detectors import DETECTORS_VERSION, NLL_VERSION, chat_prefix, response_nll
from automon.probes.features import (FEATURES_VERSION, Encoder, FeatureCache, default_cache_root, features,
                                     pooled_layer)
from automon.schema import Sample


def _load_lm(model_cfg: Any, adapter_dir: str | Path | None) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(model_cfg), revision=model_cfg.revision,
                                                 dtype=torch.float32)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    return model.eval()


def hidden_identity(model_cfg: Any, adapter_hash: str | None, layer: int, pooling: str, max_length: int) -> dict:
    return {"encoder": model_identity(model_cfg.pretrained), "revision": model_cfg.revision,
            "adapter": adapter_hash, "layer": layer, "pooling": pooling, "max_length": max_length,
            "dtype": "float32", "version": FEATURES_VERSION}


def pooled_hidden_states(model_cfg: Any, adapter_dir: str | Path | None, adapter_hash: str | None,
                         samples: Sequence[Sample], layer: int = -1, pooling: str = "mean", *,
                         max_length: int = 256, batch_size: int = 8, cache_root: Path | None = None) -> np.ndarray:
    """Rows in `samples` order; only what the cache lacks is computed (the model loads only then).
    Tokenised and pooled as the probes' hidden-state encoder does (a left-truncating tokenizer, pooled_layer)."""
    state: dict[str, Any] = {}

    def encode(texts: list[str]) -> np.ndarray:
        if not state:
            state["tok"] = shared_tokenizer(model_cfg, left_truncating=True)
            state["model"] = _load_lm(model_cfg, adapter_dir)
        batch = state["tok"](texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return pooled_layer(state["model"], batch, layer, pooling)

    enc = Encoder(hidden_identity(model_cfg, adapter_hash, layer, pooling, max_length), encode, batch_size)
    return features(enc, samples, cache_root)


def response_perplexities(model_cfg: Any, samples: Sequence[Sample], *, max_length: int = 512,
                          batch_size: int = 4, cache_root: Path | None = None) -> np.ndarray:
    """Log-perplexity of each response under the base model, given its request as a chat turn."""
    ident = {"detector": "perplexity", "model": model_identity(model_cfg.pretrained), "revision": model_cfg.revision,
             "max_length": max_length, "dtype": "float32", "version": DETECTORS_VERSION,
             "computation": NLL_VERSION}
    cache = FeatureCache(cache_root or default_cache_root(), ident)
    todo = cache.missing([s.id for s in samples])
    if todo:
        by_id = {s.id: s for s in samples}
        tok = shared_tokenizer(model_cfg)
        model = _load_lm(model_cfg, None)
        todo.sort(key=lambda i: len(by_id[i].request) + len(by_id[i].response))  # similar lengths pad little
        for k in range(0, len(todo), 64):  # saved every 64 samples: a killed run keeps them
            ids = todo[k:k + 64]
            nll = response_nll(model, tok, [chat_prefix(tok, by_id[i].request) for i in ids],
                               [by_id[i].response for i in ids], max_length, batch_size)
            cache.put(ids, nll[:, None])
    return cache.get([s.id for s in samples])[:, 0].astype(np.float64)
