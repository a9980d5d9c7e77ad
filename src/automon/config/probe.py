"""Schema of conf/probe.yaml (train/probe.py): one probe, trained on one subset of a data build.
Unknown keys and typos fail at start-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore

from automon.config.common import ConfigError, DataConfig, ModelConfig, register_common
from automon.config.help import register_help
from automon.probes.features import POOLINGS
from automon.probes.fit import PROBE_FEATURES
from automon.subsets import ALL
from automon.subsets import names as subset_names


@dataclass
class ProbeTrainConfig:
    features: str = "lexical"          # what the probe reads: lexical | minilm | hidden
    train_subset: str = ALL            # the subset it learns from (one subset name, or all), as backend.train_subsets
    cap: int = 2000                    # training samples per subset and label (seeded subsample)
    seed: int = 0                      # seed of the subsample and of the classifier
    layer: int = -1                    # hidden: which hidden state (-1 the last, 0 the embeddings)
    pooling: str = "mean"              # hidden: mean | last
    max_length: int = 256              # tokens of the probe text an encoder reads (left-truncated)
    batch_size: int = 16               # encoder batch
    # trained probes (and encoder features) go to <cache_dir>/probes/<identity hash>; null: $AUTOMON_CACHE.
    # An evaluation with backend=probe and the same settings (backend.cache_dir) loads them from there.
    cache_dir: Optional[str] = None
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)  # features=hidden: the LM whose hidden states it reads

    def __post_init__(self) -> None:
        if self.features not in PROBE_FEATURES:
            raise ConfigError(f"features={self.features!r}; choose one of {', '.join(PROBE_FEATURES)}")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"pooling={self.pooling!r}; choose one of {', '.join(POOLINGS)}")
        if self.train_subset not in (*subset_names(), ALL):
            raise ConfigError(f"train_subset={self.train_subset!r}; choose one of {', '.join([*subset_names(), ALL])}")
        if self.cap < 1 or self.max_length < 8 or self.batch_size < 1:
            raise ConfigError("cap and batch_size must be >= 1 and max_length >= 8")
        if self.seed < 0:  # the classifier's random_state: a traceback inside scikit-learn after the features
            raise ConfigError(f"seed={self.seed} is out of range (seed); use a value >= 0")


def register(cs: ConfigStore | None = None) -> None:
    cs = cs or ConfigStore.instance()
    register_help()
    register_common(cs)
    cs.store(name="probe_schema", node=ProbeTrainConfig)
