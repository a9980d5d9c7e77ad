"""Fitting a probe on a build's training split, and its identity (what its predictions depend on).

A probe is a logistic regression on features of the probe text (automon.probes.features): TF-IDF word
1-2 grams for `lexical`, a frozen sentence encoder for `minilm`, a causal LM's pooled hidden state for
`hidden`. It is trained like an adapter, on one subset's training samples or on all of them, from a
deterministic label-stratified subsample (at most `cap` per subset and label), and
gives P(misbehavior) for any sample, so the evaluation scores it exactly as it scores an LLM judge.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from automon.errors import UserError
from automon.models.tiny import default_cache_dir
from automon.outdir import ensure_writable_dir
from automon.probes.features import Encoder, probe_text
from automon.probes.features import features as feature_matrix
from automon.schema import Sample
from automon.subsets import ALL

log = logging.getLogger(__name__)

PROBE_VERSION = "probe_v1"  # bump when fitting changes (regularisation, vectoriser, subsampling)
PROBE_FEATURES = ("lexical", "minilm", "hidden")  # what a probe reads (backend.features=)


def training_samples(train: Sequence[Sample], subset: str, cap: int, seed: int) -> list[Sample]:
    """At most `cap` samples of each label from each subset (`subset=all`: from every subset), drawn
    with a seeded shuffle of the ids in sorted order, so the same build gives the same set."""
    groups: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for s in train:
        if subset in (ALL, s.subset):
            groups[(s.subset, s.label)].append(s)
    out: list[Sample] = []
    for key in sorted(groups):
        rows = sorted(groups[key], key=lambda s: s.id)
        random.Random(f"{seed}:{key[0]}:{key[1]}").shuffle(rows)
        out += rows[:cap]
    return sorted(out, key=lambda s: s.id)


@dataclass
class Probe:
    features: str                       # one of PROBE_FEATURES
    model: Any                          # sklearn estimator with predict_proba
    encoder: Encoder | None = None      # None for lexical (the vectoriser is part of `model`)

    def predict(self, samples: Sequence[Sample], cache_root: Path | None = None) -> np.ndarray:
        """P(misbehavior) per sample."""
        x = ([probe_text(s) for s in samples] if self.encoder is None
             else feature_matrix(self.encoder, samples, cache_root))
        return self.model.predict_proba(x)[:, 1]


def fit_probe(features: str, encoder: Encoder | None, train: Sequence[Sample], seed: int,
              cache_root: Path | None = None, progress: Callable[[int], None] | None = None) -> Probe:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.array([s.label for s in train])
    if len(set(y.tolist())) < 2:
        raise UserError(f"a {features} probe needs training samples of both labels; got {len(train)} of one label",
                        "backend.train_subsets", "train on a subset whose training split has both labels")
    # liblinear, not lbfgs: deterministic to the last bit for a fixed input order and seed.
    lr = LogisticRegression(C=1.0, max_iter=2000, solver="liblinear", random_state=seed)
    if encoder is None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=200_000,
                                              sublinear_tf=True), lr)
        model.fit([probe_text(s) for s in train], y)
    else:
        model = make_pipeline(StandardScaler(), lr)
        model.fit(feature_matrix(encoder, train, cache_root, progress), y)
    return Probe(features, model, encoder)


def probe_identity(features: str, encoder: Encoder | None, subset: str, cap: int, seed: int,
                   manifest_hash: str) -> dict[str, Any]:
    # "probe" names the features (backend.features), "features" the encoder's full identity: the keys
    # are those of the probes fitted so far (their directories are named by this dict's hash).
    return {"probe": features, "version": PROBE_VERSION, "features": encoder.identity if encoder else "tfidf-1-2gram",
            "train_subset": subset, "cap_per_subset_label": cap, "seed": seed, "data_manifest_hash": manifest_hash}


def identity_hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def probe_roots(cache_dir: str | Path | None) -> tuple[Path, Path]:
    """(trained probes, encoder features) under `cache_dir` (None: $AUTOMON_CACHE). A probe's
    directory is `<probes>/<identity hash[:16]>`: train/probe.py writes it, an evaluation reads it."""
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    return base / "probes", base / "features"


def probe_dir(probes_root: Path, identity: dict[str, Any]) -> Path:
    return Path(probes_root) / identity_hash(identity)[:16]


PROBE_FILE, PROBE_META_FILE = "probe.pkl", "probe.json"


def save_probe(probe: Probe, d: Path, identity: dict[str, Any], n_train: int,
               provenance: dict[str, Any] | None = None) -> None:
    """The fitted classifier (not the encoder: it is rebuilt from the identity) and what made it:
    the identity (features, encoder, subset, subsample, seed, build manifest hash), the number of
    training samples and, like an adapter's automon_adapter.json, the code that fitted it.
    probe.json is written last: it marks the directory complete."""
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f"{PROBE_FILE}.tmp"
    tmp.write_bytes(pickle.dumps(probe.model))
    tmp.replace(d / PROBE_FILE)
    meta = json.dumps({**identity, "n_train": n_train, **(provenance or {})}, indent=1, sort_keys=True) + "\n"
    tmp = d / f"{PROBE_META_FILE}.tmp"
    tmp.write_text(meta)
    tmp.replace(d / PROBE_META_FILE)


def train_probe(features: str, encoder: Encoder | None, train: Sequence[Sample], subset: str, cap: int, seed: int,
                manifest_hash: str, out_dir: Path, features_root: Path | None = None,
                provenance: dict[str, Any] | None = None) -> Probe:
    """Fit one probe on `subset`'s training samples of a build and save it to `out_dir` with its
    identity: what train/probe.py runs, and what an evaluation runs for a probe not trained yet."""
    rows = training_samples(train, subset, cap, seed)
    probe = fit_probe(features, encoder, rows, seed, features_root)
    ident = probe_identity(features, encoder, subset, cap, seed, manifest_hash)
    save_probe(probe, Path(out_dir), ident, len(rows), provenance)
    return probe


def probe_trained(d: Path) -> bool:
    """Whether `d` holds a trained probe's files (probe.json is written last)."""
    return (d / PROBE_FILE).is_file() and (d / PROBE_META_FILE).is_file()


def load_probe(d: Path, features: str, encoder: Encoder | None) -> Probe | None:
    """The trained probe in `d`, None when there is none: also when probe.pkl is damaged (cut short, or
    another object than a classifier), with a warning; it is then fitted again, as a missing one is."""
    f = d / PROBE_FILE
    if not probe_trained(d):
        return None
    try:
        model = pickle.loads(f.read_bytes())
    except Exception as e:  # noqa: BLE001 - any unpickling failure: a damaged file, refitted
        log.warning("%s is damaged (%s: %s): the probe is fitted again", f, type(e).__name__, e)
        return None
    if not callable(getattr(model, "predict_proba", None)):
        log.warning("%s holds a %s, not a fitted probe: the probe is fitted again", f, type(model).__name__)
        return None
    return Probe(features, model, encoder)


def check_probe_cache(d: Path, cache_dir: str | Path | None, key: str) -> None:
    """Before any encoder or fitting work: a probe not trained yet can be written where its identity
    puts it (`key`, or $AUTOMON_CACHE when unset: a file, or a read-only HOME, failed after the fit)."""
    if probe_trained(d):
        return
    probes, features = probe_roots(cache_dir)
    where = key if cache_dir else "AUTOMON_CACHE"
    for root in (probes, features):
        ensure_writable_dir(root, where)
