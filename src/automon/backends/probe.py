"""backend=probe: cheap real monitors (a logistic-regression probe on lexical, sentence-encoder or LM
hidden-state features) scored by the same evaluation as LLM judges.

`python eval/holdout.py backend=probe backend.features=minilm backend.train_subsets=[safety_code,all]
data.dir=<build>` fits one probe per training subset (cached by its identity: features and their
encoder, subset, subsample, seed, the build's manifest hash) and scores each on every test subset: one matrix row per
probe, with the same predictions.jsonl, metrics, CIs, curves and plots as a judge. A probe reads the
sample itself (automon.probes.features.probe_text), not the monitor prompt, and gives P(misbehavior),
which the evaluation treats as P(yes) under the direct prompt's threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, List, Optional, Sequence

from automon.config.common import API_MODEL, ConfigError
from automon.backends.base import BackendConfig, JudgeError, JudgeRequest, JudgeResult, JudgeTiming, LoraAdapter
from automon.subsets import ALL
from automon.subsets import names as subset_names


@dataclass
class ProbeConfig(BackendConfig):
    name: str = "probe"
    features: str = "lexical"          # what the probe reads: lexical | minilm | hidden (automon.probes.fit.PROBE_FEATURES)
    train_subsets: List[str] = field(default_factory=lambda: [*subset_names(), ALL])
    cap: int = 2000                    # training samples per subset and label (seeded subsample)
    seed: int = 0
    layer: int = -1                    # hidden: which hidden state (-1 the last, 0 the embeddings)
    pooling: str = "mean"              # hidden: mean | last
    max_length: int = 256              # tokens of the probe text an encoder reads (left-truncated)
    batch_size: int = 16               # encoder batch
    data_dir: str = "${data.dir}"      # the build whose train split the probes learn from
    cache_dir: Optional[str] = None    # fitted probes + features; null: $AUTOMON_CACHE/{probes,features}
    chunk_size: int = 4096
    max_seq_length: Optional[int] = None  # the monitor prompt is not what a probe reads

    local_model: ClassVar[bool] = False   # no prompt rendering; `hidden` loads its own model

    def __post_init__(self) -> None:
        super().__post_init__()
        from automon.probes.features import POOLINGS
        from automon.probes.fit import PROBE_FEATURES

        if self.features not in PROBE_FEATURES:
            raise ConfigError(f"backend.features={self.features!r}; choose one of {', '.join(PROBE_FEATURES)}")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"backend.pooling={self.pooling!r}; choose one of {', '.join(POOLINGS)}")
        valid = [*subset_names(), ALL]
        bad = [s for s in self.train_subsets if s not in valid]
        if bad or not self.train_subsets:
            raise ConfigError(f"backend.train_subsets={list(self.train_subsets)}: each must be one of {', '.join(valid)}")
        if self.cap < 1 or self.max_length < 8 or self.batch_size < 1:
            raise ConfigError("backend.cap and backend.batch_size must be >= 1 and backend.max_length >= 8")

    def check_model(self, model: Any) -> None:
        # `model` names the hidden-state LM (features=hidden) and the report's model; never the API placeholder
        if model.name == API_MODEL:
            raise ConfigError(f"model={API_MODEL} is the placeholder for backend=openai; backend=probe needs a "
                              "local model (e.g. model=tiny, or the LM whose hidden states backend.features=hidden reads)")

    def model_label(self, model: Any) -> str:
        return f"probe-{self.features}-{model.name}" if self.features == "hidden" else f"probe-{self.features}"

    def encoder(self, model: Any):
        from automon.probes.features import hidden_state_encoder, minilm_encoder

        if self.features == "minilm":
            return minilm_encoder(self.max_length, self.batch_size)
        if self.features == "hidden":
            return hidden_state_encoder(model, self.layer, self.pooling, self.max_length, self.batch_size)
        return None

    def roots(self) -> tuple[Path, Path]:
        from automon.models.tiny import default_cache_dir

        base = Path(self.cache_dir) if self.cache_dir else default_cache_dir()
        return base / "probes", base / "features"

    def cache_identity(self, model: Any, kind: str, adapter: str | None) -> dict[str, Any]:
        # The fitted probe's identity is the monitor's adapter hash; what is left is how it reads.
        # ("probe" names the features, "features" the encoder's identity: the keys of existing caches.)
        enc = self.encoder(model)
        return {"probe": self.features, "features": enc.identity if enc else "tfidf-1-2gram",
                **self.generation_identity(kind)}

    def plan(self, model: Any) -> list[tuple[str, dict, str, Path]]:
        """(training subset, probe identity, its sha256, its directory) per probe; cheap: fits nothing."""
        from automon.data.io import load_build
        from automon.probes.fit import identity_hash, probe_identity

        manifest_hash = load_build(self.data_dir).manifest_hash
        enc = self.encoder(model)
        out = []
        for subset in self.train_subsets:
            ident = probe_identity(self.features, enc, subset, self.cap, self.seed, manifest_hash)
            h = identity_hash(ident)
            out.append((subset, ident, h, self.roots()[0] / h[:16]))
        return out

    def monitors(self, cfg: Any) -> list:
        """One monitor per training subset, identified by its probe's identity (fitted by the judge)."""
        from automon.evaluation.monitors import Monitor

        return [Monitor(name=f"{self.features}-{subset}", label=subset, adapter_dir=d, adapter_hash=h,
                        adapter_type="probe")
                for subset, _, h, d in self.plan(cfg.model)]

    def make_judge(self, model: Any, kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> "ProbeJudge":
        if kind != "direct":
            raise JudgeError(f"backend=probe gives a probability, not an evidence answer: use prompt=direct_v1 "
                             f"(got a {kind} prompt)")
        return ProbeJudge(self, model, adapters)


class ProbeJudge:
    name = "probe"

    def __init__(self, cfg: ProbeConfig, model: Any, adapters: Sequence[LoraAdapter]):
        import logging
        import time

        from automon.data.io import load_build
        from automon.probes.fit import fit_probe, load_probe, save_probe, training_samples

        self.enc = cfg.encoder(model)
        self.features_root = cfg.roots()[1]
        self.timing = JudgeTiming()
        build = load_build(cfg.data_dir)
        wanted = {str(a.path) for a in adapters}
        train = None
        self.probes = {}
        for subset, ident, _, d in cfg.plan(model):
            if str(d) not in wanted:
                continue
            probe = load_probe(d, cfg.features, self.enc)
            if probe is None:  # fitted once per identity, then loaded
                train = train if train is not None else build.samples("train")
                rows = training_samples(train, subset, cfg.cap, cfg.seed)
                t0 = time.perf_counter()
                probe = fit_probe(cfg.features, self.enc, rows, cfg.seed, self.features_root)
                self.timing.extra[f"fit_{subset}_s"] = time.perf_counter() - t0
                logging.getLogger(__name__).info("fitted the %s probe on %s: %d training samples in %.1f s",
                                                 cfg.features, subset, len(rows), time.perf_counter() - t0)
                save_probe(probe, d, ident, len(rows))
            self.probes[f"{cfg.features}-{subset}"] = probe
        # the train split too: far_reference / fusion score in-distribution calibration samples
        self.samples = {s.id: s for split in ("test", "train") for s in build.samples(split)}

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        import time

        out: list[JudgeResult | None] = [None] * len(requests)
        by_probe: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            if r.adapter not in self.probes:
                raise JudgeError(f"backend=probe scores probes only; request {r.id} asks for {r.adapter!r}")
            by_probe.setdefault(r.adapter, []).append(i)
        for name, idx in by_probe.items():
            t0 = time.perf_counter()
            p = self.probes[name].predict([self.samples[requests[i].id] for i in idx], self.features_root)
            self.timing.model_s += time.perf_counter() - t0
            for i, v in zip(idx, p):
                out[i] = JudgeResult(p_yes=float(v), text=None, mass=1.0)
        return out  # type: ignore[return-value]

    def close(self) -> None:
        pass
