"""A probe: a logistic regression on features of the sample itself (automon.probes), a cheap real
monitor scored exactly like a judge. It reads the sample (automon.probes.features.probe_text), not
the monitor prompt, and its P(misbehavior) stands in for P(yes) under the direct prompt's threshold.

A probe is trained by train/probe.py (automon.probes.fit.train_probe) into the directory named by
its identity (features and their encoder, subset, subsample, seed, the build's manifest hash); an
evaluation loads it from there, or fits it the same way when it is scored before it was trained.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from automon.backends.base import JudgeTiming
from automon.errors import UserError
from automon.monitors.base import Monitor, Prediction, Rendered, Resources
from automon.probes.features import Encoder
from automon.probes.features import check_layer
from automon.probes.fit import Probe, check_probe_cache, identity_hash, load_probe, probe_dir, probe_identity, train_probe
from automon.prompts import get_template
from automon.schema import Sample
from automon.subsets import ALL
from automon.versions import code_version

log = logging.getLogger(__name__)


@dataclass(eq=False)
class ProbeMonitor(Monitor):
    features: str = "lexical"          # what the probe reads (automon.probes.fit.PROBE_FEATURES)
    subset: str = ALL                  # what it is trained on
    cap: int = 2000                    # training samples per subset and label
    seed: int = 0
    manifest_hash: str = ""            # the build it is trained on
    build_dir: str = ""
    encoder: Encoder | None = field(default=None, repr=False)
    features_root: Path | None = None  # the feature cache
    threshold: float = 0.5             # flag when P(misbehavior) >= threshold
    probe: Probe | None = field(default=None, repr=False)
    timing: JudgeTiming = field(default_factory=JudgeTiming, repr=False)  # the evaluation's, once loaded
    monitor_kind: ClassVar[str] = "probe"

    def load(self, resources: Resources) -> None:
        self.timing = resources.timing
        self.probe = load_probe(self.artifact_dir, self.features, self.encoder)  # type: ignore[arg-type]
        if self.probe is None:  # not trained yet: trained now, once per identity, then loaded
            self.fit(resources.train_split(self.build_dir))

    def fit(self, train: Sequence[Sample]) -> None:
        t0 = time.perf_counter()
        self.probe = train_probe(self.features, self.encoder, train, self.subset, self.cap, self.seed,
                                 self.manifest_hash, self.artifact_dir, self.features_root,  # type: ignore[arg-type]
                                 {"code_version": code_version()})
        dt = time.perf_counter() - t0
        self.timing.extra[f"fit_{self.subset}_s"] = dt
        log.info("fitted the %s probe on %s in %.1f s", self.features, self.subset, dt)

    def score(self, items: Sequence[Rendered]) -> list[Prediction]:
        if self.probe is None:
            raise RuntimeError(f"monitor {self.name}: load() before score()")
        t0 = time.perf_counter()
        p = self.probe.predict([it.sample for it in items], self.features_root)
        self.timing.model_s += time.perf_counter() - t0
        return [Prediction(p_yes=float(v), text=None, mass=1.0) for v in p]

    def flag(self, p: Prediction) -> int | None:
        if p.error is not None or p.p_yes is None:
            return None
        return int(p.p_yes >= self.threshold)


def probe_monitors(c: Any, manifest_hash_of: Callable[[str], str]) -> list[Monitor]:
    """backend=probe: one probe per backend.train_subsets entry, trained on the build backend.data_dir,
    each a matrix row like an adapter."""
    if get_template(c.prompt.name).kind != "direct":
        raise UserError(f"backend=probe gives a probability, not an evidence answer (prompt={c.prompt.name})",
                        "prompt", "use prompt=direct_v1")
    b = c.backend
    manifest_hash = manifest_hash_of(str(b.data_dir))
    enc = b.encoder(c.model)
    probes_root, features_root = b.roots()
    out: list[Monitor] = []
    for subset in b.train_subsets:
        ident = probe_identity(b.features, enc, subset, b.cap, b.seed, manifest_hash)
        out.append(ProbeMonitor(name=f"{b.features}-{subset}", row=subset, artifact_dir=probe_dir(probes_root, ident),
                                artifact_hash=identity_hash(ident), features=b.features, subset=subset, cap=b.cap, seed=b.seed,
                                manifest_hash=manifest_hash, build_dir=str(b.data_dir), encoder=enc,
                                features_root=features_root, threshold=c.threshold))
    if b.features == "hidden":  # before the LM loads
        check_layer(c.model, b.layer, "backend.layer")
    for m in out:  # a probe not trained yet is fitted and saved while scoring: its cache must take it
        check_probe_cache(m.artifact_dir, b.cache_dir, "backend.cache_dir")
    return out
