"""backend=probe: the settings of probe monitors (automon.monitors.probe), cheap real monitors (a
logistic-regression probe on lexical, sentence-encoder or LM hidden-state features) scored by the
same evaluation as LLM judges. No scoring backend serves them: the config defines its own monitors.

`python eval/holdout.py backend=probe backend.features=minilm backend.train_subsets=[safety_code,all]
data.dir=<build>` scores one probe per training subset (trained by train/probe.py, or fitted on first
use, into the directory named by its identity: features and their encoder, subset, subsample, seed,
the build's manifest hash) on every test subset: one matrix row per probe, with the same
predictions.jsonl, metrics, CIs, curves and plots as a judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, List, Optional

from automon.errors import ConfigError
from automon.models.loading import API_MODEL
from automon.backends.base import BackendConfig
from automon.probes.features import POOLINGS, Encoder, make_encoder
from automon.probes.fit import PROBE_FEATURES, probe_roots
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
    defines_monitors: ClassVar[Optional[str]] = "probe"  # one probe monitor per train_subsets entry

    def __post_init__(self) -> None:
        super().__post_init__()
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
        if self.seed < 0:  # the classifier's random_state: a traceback inside scikit-learn after the features
            raise ConfigError(f"backend.seed={self.seed} is out of range (backend.seed); use a value >= 0")

    def check_model(self, model: Any) -> None:
        # `model` names the hidden-state LM (features=hidden) and the report's model; never the API placeholder
        if model.name == API_MODEL:
            raise ConfigError(f"model={API_MODEL} is the placeholder for backend=openai; backend=probe needs a "
                              "local model (e.g. model=tiny, or the LM whose hidden states backend.features=hidden reads)")

    def model_label(self, model: Any) -> str:
        return f"probe-{self.features}-{model.name}" if self.features == "hidden" else f"probe-{self.features}"

    def encoder(self, model: Any) -> Encoder | None:
        return make_encoder(self.features, model, self.layer, self.pooling, self.max_length, self.batch_size)

    def roots(self) -> tuple[Path, Path]:
        return probe_roots(self.cache_dir)

    def cache_identity(self, model: Any, prompt_kind: str, adapter: str | None) -> dict[str, Any]:
        # The probe's identity is the monitor's adapter hash; what is left is how it reads.
        # ("probe" names the features, "features" the encoder's identity: the keys of existing caches.)
        enc = self.encoder(model)
        return {"probe": self.features, "features": enc.identity if enc else "tfidf-1-2gram",
                **self.generation_identity(prompt_kind)}
