"""Training a probe (what train/probe.py runs): fit it on one subset of a build's training split and
save it, with its identity and the code that fitted it, to the directory an evaluation with
backend=probe and the same settings reads (automon.probes.fit.probe_dir)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from automon.config.probe import ProbeTrainConfig
from automon.data.io import load_build
from automon.probes.features import check_layer, make_encoder
from automon.probes.fit import PROBE_META_FILE, check_probe_cache, load_probe, probe_dir, probe_identity, probe_roots, train_probe
from automon.stage_status import Currency, Status
from automon.versions import code_version, library_versions


def as_config(cfg: Any) -> ProbeTrainConfig:
    return cfg if isinstance(cfg, ProbeTrainConfig) else OmegaConf.to_object(cfg)  # type: ignore[return-value]


def where(c: ProbeTrainConfig) -> tuple[Path, dict, Any]:
    """(the probe's directory, its identity, its encoder) for a config."""
    enc = make_encoder(c.features, c.model, c.layer, c.pooling, c.max_length, c.batch_size)
    ident = probe_identity(c.features, enc, c.train_subset, c.cap, c.seed, load_build(c.data.dir).manifest_hash)
    return probe_dir(probe_roots(c.cache_dir)[0], ident), ident, enc


def status(cfg: Any) -> Status:
    """current when the probe of this config is trained (its directory is named by its identity)."""
    d, _, enc = where(as_config(cfg))
    if load_probe(d, as_config(cfg).features, enc) is None:
        return Status(Currency.MISSING, f"no trained probe at {d}")
    return Status(Currency.CURRENT, f"trained probe at {d}")


def run(cfg: Any) -> Path:
    c = as_config(cfg)
    if c.features == "hidden":  # before the LM loads
        check_layer(c.model, c.layer, "layer")
    d, ident, enc = where(c)
    check_probe_cache(d, c.cache_dir, "cache_dir")
    if load_probe(d, c.features, enc) is not None:
        print(f"{d} is trained already ({PROBE_META_FILE}: {ident['probe']} on {c.train_subset})")
        return d
    build = load_build(c.data.dir)
    train_probe(c.features, enc, build.samples("train"), c.train_subset, c.cap, c.seed, build.manifest_hash, d,
                probe_roots(c.cache_dir)[1], {"code_version": code_version(), "library_versions": library_versions(),
                                              "data_dir": str(c.data.dir)})
    print(f"wrote {d}")
    return d
