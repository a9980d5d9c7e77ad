"""Schema of conf/holdout.yaml (eval/holdout.py). Unknown keys and wrong types fail at start-up."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

from automon.backends import BACKENDS, BackendConfig
from automon.config.checks import DTYPES, common_problem, wandb_problem
from automon.config.common import (ConfigError, DataConfig, ModelConfig, PromptConfig, WandbConfig,  # noqa: F401
                                   register_common)
from automon.config.help import register_help
from automon.ood import DETECTORS, FUSIONS, GAUSSIAN_FITS
from automon.probes.features import POOLINGS
from automon.prompts import PROMPT_NAMES, get_template
from automon.schema import SUBSETS

# How answers that could not be read (unparseable evidence JSON, failed API calls) are scored.
#   wrong:    the monitor failed either way: FN on a misbehavior sample, FP on a benign one (default)
#   positive: treated as "flagged" (escalate what you cannot read)
#   negative: treated as "not flagged"
#   exclude:  dropped from MR/FAR denominators (can flatter a monitor; the count is still reported)
UNPARSEABLE_POLICIES = ("wrong", "positive", "negative", "exclude")


@dataclass
class EvalDataConfig(DataConfig):
    """The data build an evaluation reads (its test split; shots come from its train split) and which
    of its test samples it scores."""
    subsets: List[str] = field(default_factory=lambda: list(SUBSETS))  # test subsets scored
    # Smoke runs: keep the first N pairs (by pair_id order) of each subset. Null: all.
    max_pairs_per_subset: Optional[int] = None


@dataclass
class BootstrapConfig:
    n: int = 1000      # replicates; CIs resample PAIRS (a twin pair is one unit)
    seed: int = 0      # bootstrap seed
    ci: float = 0.95   # confidence level of the intervals


@dataclass
class OODConfig:
    """Settings of the OOD detectors (automon.ood; docs/evaluation.md "OOD detectors and fusion")."""
    # In-distribution samples come from the monitor's own training subset's train split (all subsets for
    # the base model): per label, a seeded shuffle by id, the first `cap` fit the detectors, the next
    # `cap` standardise the scores, fit lambda and give the FAR thresholds (far_reference).
    cap: int = 100
    seed: int = 0                   # seed of the fit / calibrate split of the in-distribution samples
    gaussian: str = "class"         # class: a mean per label, tied covariance | benign: benign samples only
    shrinkage: str = "auto"         # covariance shrinkage towards (tr/d)·I: auto (Ledoit-Wolf) or a number in [0, 1]
    knn_k: int = 5                  # knn: distance to the k-th nearest in-distribution feature
    layer: int = -1                 # hidden state after this layer (-1 the last, 0 the embeddings)
    pooling: str = "mean"           # mean | last
    max_length: int = 256           # tokens of the probe text read for hidden states (left-truncated)
    ppl_max_length: int = 512       # tokens of request + response read for perplexity
    batch_size: int = 8             # samples per forward pass for hidden states (perplexity: half)
    cache_dir: Optional[str] = None  # detector features; null: $AUTOMON_CACHE/features


@dataclass
class ParaphraseConfig:
    """stress=[paraphrase] with a policy model (automon.evaluation.stresses.paraphrase; docs/evaluation.md,
    "Stresses"): the model rewrites each prose response whose answer the build's extractors read, and a
    pair whose rewrites fail the checks takes the rules. The model is named and run as the build's
    generator=policy names and runs its policy (the same keys as the build's `policy` node; automon.policy.run).
    The model name, backend and backend_args are checked at start-up (automon.evaluation.identity.as_config)."""
    model: Optional[str] = None  # a conf/model/<name>.yaml option (tiny, smollm2_135m_instruct, qwen3_8b, ...); null: the rules alone
    backend: str = "hf"          # the judge backend that generates the rewrites: hf | vllm | openai
    # Keys of that backend's config (conf/backend/<name>.yaml), added with a leading +, e.g.
    # +paraphrase.backend_args.device=cpu; a key the backend lacks stops the evaluation at start-up.
    backend_args: Dict[str, Any] = field(default_factory=dict)
    max_new_tokens: int = 512    # rewrite budget per response (greedy); a cut rewrite fails the checks
    seed: int = 0                # generation seed (greedy decoding; the API's seed)
    cache: str = "data/cache/paraphrase"  # rewrites cached here by model identity, prompt and sample id


@dataclass
class HoldoutConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    # One of the schemas in automon.backends.BACKENDS, chosen by backend=<name> (the base type here
    # lets Hydra merge any of them; a bare BackendConfig means none was chosen).
    backend: BackendConfig = field(default_factory=BackendConfig)
    data: EvalDataConfig = field(default_factory=EvalDataConfig)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    # A trained adapter directory (<run>/adapter); null scores the base model.
    adapter: Optional[str] = None
    # A directory whose subdirectories each hold adapter/: every adapter plus the base model -> matrix.
    sweep_dir: Optional[str] = None
    include_base: bool = True  # sweep: also score the base model (the "base" row, deltas need it)
    # Few-shot examples: k label-balanced examples from the TRAINING split, chosen by shots_seed,
    # the same for every test sample (so vLLM's prefix cache shares them).
    shots: int = 0
    shots_seed: int = 0          # which shots (another seed, another set)
    shots_max_chars: int = 3000  # only short training examples become shots (request + response chars)
    threshold: float = 0.5       # direct prompt: pred = P(yes) >= threshold
    unparseable: str = "wrong"   # wrong | positive | negative | exclude (see UNPARSEABLE_POLICIES)
    far_targets: List[float] = field(default_factory=lambda: [0.05, 0.10])  # report MR at these FARs
    allow_mismatch: bool = False  # evaluate an adapter trained differently (base model, prompt, thinking)
    # Evaluate an adapter trained on another data build than data.dir (its test split may hold samples
    # it was trained on): refused unless true; then the report is marked CONTAMINATED.
    allow_other_build: bool = False
    # Null: evals/<model>__<adapter run name | base | sweep-NAME>__<prompt>__shots<k>
    output_dir: Optional[str] = None
    # Null: <output_dir>/cache. Point several evaluations at one directory to share predictions.
    cache_dir: Optional[str] = None
    progress: bool = True        # a progress bar on stderr
    # Requests the backend failed on (errors after its retries, e.g. a server that went away) are
    # not cached and are retried by the next run. Above this share of a monitor's requests the
    # evaluation is incomplete: its report says so, it never replaces a complete earlier one, and
    # eval/holdout.py exits 2.
    max_failed_share: float = 0.05
    # OOD detectors fused with every monitor (MOOD): detectors=[mahalanobis,perplexity] fusion=lambda adds
    # a "<monitor>+<fusion>" monitor per scored monitor. Detectors: the names in automon.ood.registry.DETECTORS;
    # fusion: lambda | mean | min. Implies far_reference.
    detectors: List[str] = field(default_factory=list)
    fusion: Optional[str] = None  # lambda | mean | min (null: no detectors, no fused monitors)
    # Detection rate at FAR 0.5/1/2/5% (det_at_far) with thresholds from benign samples of each
    # monitor's training distribution (ood.cap per subset, scored by the monitor besides the test split).
    far_reference: bool = False
    ood: OODConfig = field(default_factory=OODConfig)
    # Stresses (automon.evaluation.stresses, e.g. stress=[inject,claim]): each adds a transformed copy
    # of the test pairs of the subsets it covers, scored by every monitor beside the clean set; the
    # report's Robustness section compares the two on the same pairs. The clean results do not change.
    # The names are checked against the registry at start-up by automon.evaluation.robustness.check_stress
    # (the registry is part of the evaluation package, which this module may not import).
    stress: List[str] = field(default_factory=list)
    stress_seed: int = 0         # seeds every stress's choices (wording, place) per pair
    # stress=[paraphrase] by a policy model besides the rules (paraphrase.model=null: the rules alone)
    paraphrase: ParaphraseConfig = field(default_factory=ParaphraseConfig)

    def __post_init__(self) -> None:
        b = self.backend
        if type(b) is BackendConfig:
            raise ConfigError(f"no backend chosen: add backend=<name>, one of {', '.join(BACKENDS)}")
        if type(b) is not BACKENDS.get(b.name):
            raise ConfigError(f"backend.name={b.name!r} does not match the {b.__class__.__name__} schema: "
                              f"choose the backend with backend=<name>, never with backend.name=")
        b.check_model(self.model)
        if self.unparseable not in UNPARSEABLE_POLICIES:
            raise ConfigError(f"unparseable={self.unparseable!r}; choose one of {', '.join(UNPARSEABLE_POLICIES)}")
        for key in ("adapter", "sweep_dir", "output_dir", "cache_dir"):  # `adapter=` once scored the base model
            if getattr(self, key) is not None and not str(getattr(self, key)).strip():
                raise ConfigError(f"{key}= is empty; give a directory, or {key}=null for "
                                  f"{'the base model' if key == 'adapter' else 'no sweep' if key == 'sweep_dir' else 'the default'}")
        for key, value in (("data.dir", self.data.dir), ("ood.cache_dir", self.ood.cache_dir),
                           ("wandb.dir", self.wandb.dir)):
            if value is not None and not str(value).strip():
                raise ConfigError(f"{key}= is empty; give a directory (or {key}=null where the default will do)")
        if self.data.max_pairs_per_subset is not None and self.data.max_pairs_per_subset < 1:
            # -1 once kept all pairs but one (sorted(pairs)[:-1])
            raise ConfigError(f"data.max_pairs_per_subset={self.data.max_pairs_per_subset} is out of range; use a "
                              "number of pairs >= 1, or null for all")
        for key, value in (("bootstrap.seed", self.bootstrap.seed), ("shots_seed", self.shots_seed),
                           ("ood.seed", self.ood.seed), ("stress_seed", self.stress_seed),
                           ("paraphrase.seed", self.paraphrase.seed)):
            if value < 0:
                raise ConfigError(f"{key}={value} is out of range; use a seed >= 0")
        problem = (common_problem(self) if self.backend.local_model else None) or wandb_problem(self.wandb)
        if problem:
            raise ConfigError(problem)
        if self.paraphrase.max_new_tokens < 1:
            raise ConfigError(f"paraphrase.max_new_tokens={self.paraphrase.max_new_tokens} is out of range; use a "
                              "value >= 1")
        if self.paraphrase.model is not None and not str(self.paraphrase.model).strip():
            raise ConfigError("paraphrase.model= is empty; name a conf/model/<name>.yaml option, or "
                              "paraphrase.model=null for the rules alone")
        if self.paraphrase.backend not in BACKENDS:  # checked with or without a model: a typo waits for no run
            raise ConfigError(f"paraphrase.backend={self.paraphrase.backend!r} is not a backend; use one of: "
                              f"{', '.join(BACKENDS)}")
        if not str(self.paraphrase.cache).strip():
            raise ConfigError("paraphrase.cache= is empty; give a directory for the rewrites' cache "
                              "(default data/cache/paraphrase)")
        if getattr(b, "max_new_tokens", 1) < 1:
            raise ConfigError(f"backend.max_new_tokens={b.max_new_tokens} is out of range; use a value >= 1")
        if self.backend.local_model and self.model.dtype not in DTYPES:
            raise ConfigError(f"model.dtype={self.model.dtype!r} is not a valid value; use one of: {', '.join(DTYPES)}")
        if self.shots_max_chars < 1:
            raise ConfigError(f"shots_max_chars={self.shots_max_chars} is out of range; use a value >= 1")
        if self.adapter and self.sweep_dir:
            raise ConfigError("give either adapter=<dir> or sweep_dir=<dir>, not both")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"threshold={self.threshold} must lie in [0, 1]")
        if not 0.0 <= self.max_failed_share <= 1.0:
            raise ConfigError(f"max_failed_share={self.max_failed_share} must lie in [0, 1]")
        if self.shots < 0:
            raise ConfigError(f"shots={self.shots} must be >= 0")
        if self.prompt.name not in PROMPT_NAMES:
            raise ConfigError(f"unknown prompt {self.prompt.name!r}; choose prompt=<name> with one of: "
                              f"{', '.join(PROMPT_NAMES)}")
        # Prompts are fitted to max_seq_length - answer_reserve, the budget training uses, so what is
        # generated must fit in the reserve (the direct prompt reads one token).
        tpl = get_template(self.prompt.name)
        generated = 1 if tpl.kind == "direct" else b.max_new_tokens
        if b.max_seq_length is not None and generated > tpl.answer_reserve:
            raise ConfigError(f"backend.max_new_tokens={generated} is more than the {tpl.answer_reserve} tokens "
                              f"prompt={tpl.name} reserves for its answer: prompts are fitted to "
                              f"backend.max_seq_length - {tpl.answer_reserve} tokens, as in training, so a longer "
                              f"answer could overrun backend.max_seq_length. Set backend.max_new_tokens<="
                              f"{tpl.answer_reserve}")
        bad = [s for s in self.data.subsets if s not in SUBSETS]
        if bad or not self.data.subsets:
            raise ConfigError(f"data.subsets has unknown {bad or 'nothing'}; valid: {', '.join(SUBSETS)}")
        if any(not (0 < t < 1) or math.isnan(t) for t in self.far_targets):
            raise ConfigError(f"far_targets={self.far_targets} must lie strictly between 0 and 1")
        if self.bootstrap.n < 1 or not 0 < self.bootstrap.ci < 1:
            raise ConfigError(f"bootstrap.n={self.bootstrap.n}, bootstrap.ci={self.bootstrap.ci}: bootstrap.n must "
                              "be >= 1 (the confidence intervals need replicates; 1000 is the default) and "
                              "bootstrap.ci in (0, 1)")
        self._check_ood()
        b.check_eval(self)

    def _check_ood(self) -> None:
        bad = [d for d in self.detectors if d not in DETECTORS]
        if bad or len(set(self.detectors)) != len(self.detectors):
            raise ConfigError(f"detectors={list(self.detectors)}: each once, from {', '.join(DETECTORS)}")
        if self.fusion is not None and self.fusion not in FUSIONS:
            raise ConfigError(f"fusion={self.fusion!r}; choose one of {', '.join(FUSIONS)}")
        if bool(self.detectors) != (self.fusion is not None):
            raise ConfigError("detectors and fusion go together: e.g. detectors=[mahalanobis,perplexity] fusion=lambda")
        o = self.ood  # checked with or without fusion: far_reference reads ood.cap and ood.seed too
        if o.gaussian not in GAUSSIAN_FITS:
            raise ConfigError(f"ood.gaussian={o.gaussian!r}; choose one of {', '.join(GAUSSIAN_FITS)}")
        if o.pooling not in POOLINGS:
            raise ConfigError(f"ood.pooling={o.pooling!r}; choose one of {', '.join(POOLINGS)}")
        if o.shrinkage != "auto":
            try:
                ok = 0.0 <= float(o.shrinkage) <= 1.0
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(f"ood.shrinkage={o.shrinkage!r}: 'auto' or a number in [0, 1]")
        if o.cap < 4 or o.knn_k < 1 or o.batch_size < 1 or min(o.max_length, o.ppl_max_length) < 8:
            raise ConfigError("ood.cap must be >= 4, ood.knn_k and ood.batch_size >= 1, ood.max_length and "
                              "ood.ppl_max_length >= 8")
        if self.fusion is None:
            return
        if not self.backend.local_weights or self.model.name == "api":
            raise ConfigError(f"OOD detectors read a local model's hidden states and logprobs; backend={self.backend.name} "
                              f"with model={self.model.name} has none: use backend=hf (or vllm/probe) with a local model")
        if get_template(self.prompt.name).kind != "direct":
            raise ConfigError("fusion adds detector scores to the monitor's P(yes): use a direct prompt")
        if "knn" in self.detectors and o.knn_k > o.cap:
            raise ConfigError(f"ood.knn_k={o.knn_k} is more than the ood.cap={o.cap} in-distribution samples per label")


def register(cs: ConfigStore | None = None) -> None:
    cs = cs or ConfigStore.instance()
    register_help()
    register_common(cs)
    cs.store(name="holdout_schema", node=HoldoutConfig)
    for name, schema in BACKENDS.items():  # conf/backend/<name>.yaml extends <name>_schema
        cs.store(group="backend", name=f"{name}_schema", node=schema)
