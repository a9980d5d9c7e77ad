"""Schema of conf/build.yaml (data_build/build.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from automon.config.common import DEFAULT_BUILD_DIR
from automon.config.help import register_help
from automon.config.sg_code import SgCodeConfig
from automon.config.wordings import WordingsConfig, same_schema, wordings_schema
from automon.errors import UserError
from automon.sandbox.isolation import candidates
from automon.subsets import names as subset_names
from automon.subsets import policy_subsets
from automon.subsets import specs as subset_specs


@dataclass
class SourcesConfig:
    # Local data root (shared/data/raw). null: read every source from the hub / upstream URLs.
    root: Optional[str] = None
    # stop: fail at the first malformed row (naming file and line); skip: skip and count it.
    on_malformed: str = "stop"
    # sha256sum list the local source files are checked against; null: SHA256SUMS in sources.root,
    # else beside it, if there is one.
    checksums: Optional[str] = None
    # fail: stop when a source file differs from the list or is not in it; warn: log it and go on.
    # The manifest records the list, this setting and every difference.
    on_checksum: str = "fail"
    # Hub revisions (commit sha or tag) per source name, e.g. {gsm8k: <sha>}; unset = "main".
    revisions: Dict[str, str] = field(default_factory=dict)


def test_sizes_schema() -> type:
    """The `test` node: test pairs per subset (samples = 2 x pairs), one int field per registered
    subset with the registry's default, so `test.<typo>=6` and `test.safety_qa=six` fail when the
    config is composed (automon.errors.entry names the valid subsets on the command line)."""
    return make_dataclass("TestSizes", [(s.name, int, field(default=s.test_pairs)) for s in subset_specs()])


TestSizes = test_sizes_schema()


@dataclass
class SandboxConfig:
    """How policy-written and template code is isolated while it is verified (automon.sandbox,
    docs/security.md). auto: bubblewrap, else util-linux unshare; the build stops if neither runs.
    bwrap / unshare: that mode only. none: NO isolation, the programs run with your privileges;
    only for a machine where nothing can isolate, and the dataset card then says so in capitals."""
    isolation: str = "auto"  # auto (bwrap, else unshare) | bwrap | unshare | none (no isolation: docs/security.md)

    def __post_init__(self):
        try:
            candidates(self.isolation)  # ValueError naming the valid modes
        except ValueError as e:  # the build's entry reports user errors, not ValueError, in one line
            raise UserError(str(e), "sandbox.isolation", "see docs/security.md") from None


@dataclass
class DisjointConfig:
    ngram: int = 5           # word n-gram shingles of request + response
    num_perm: int = 128      # MinHash permutations
    threshold: float = 0.8   # estimated Jaccard at or above which a train sample is a near-duplicate
    # drop: remove conflicting train samples and count them; fail: stop the build and list them.
    on_conflict: str = "drop"
    workers: int = 2         # processes for the MinHash index
    # Re-read the written build and re-run every check independently of the filter above.
    verify_after_write: bool = True


def _policy_subsets() -> List[str]:
    return policy_subsets(by_default=True)  # the registry's SubsetSpec.policy_by_default


@dataclass
class PolicyConfig:
    """generator=policy: a policy model answers the candidate requests (automon.policy, docs/policy.md)."""
    model: str = "qwen3_4b_instruct_2507"  # a conf/model/<name>.yaml option (tiny, smollm2_135m_instruct, qwen3_8b, ...)
    backend: str = "vllm"                  # the judge backend that generates: vllm | hf | openai
    # Keys of that backend's config (conf/backend/<name>.yaml), added with a leading +, e.g.
    # +policy.backend_args.device=cpu or +policy.backend_args.base_url=http://localhost:8000/v1;
    # a key the backend lacks stops the build.
    backend_args: Dict[str, Any] = field(default_factory=dict)
    # Subsets whose test pairs the policy writes, each through its SubsetSpec.policy_recipe (syco_qa,
    # syco_reasoning: counterfactual filter; sg_code: labelled by execution); the others keep the template generator.
    subsets: List[str] = field(default_factory=_policy_subsets)
    # Candidate items asked per source and subset (seeded choice); null = every test-eligible item.
    # Policy generation on CPU is slow: cap it there (e.g. 30).
    max_items_per_source: Optional[int] = None
    max_new_tokens: int = 256   # answer budget per prompt (greedy)
    seed: int = 0               # generation seed (greedy decoding; the API's seed)
    cache: str = "data/cache/policy"  # answers cached here by model identity, prompt, sample id, seed


@dataclass
class AuditConfig:
    """The shortcut audit (automon.data.audit): surface baselines that see only the response."""
    enabled: bool = True             # false: no audit (manifest.json then has no "audit")
    max_auroc: float = 0.70          # response-only lexical AUROC above this: the subset has a shortcut
    max_pair_accuracy: float = 0.75  # ... or pair accuracy above this
    # fail: stop the build naming the subsets and their give-away n-grams; warn: log and record it.
    # warn by default, so that a subset over the ceiling for a reason the wordings record (their
    # shortcut_notes: the safety subsets) still builds; the card names every subset over the ceiling,
    # with its rates and that reason.
    on_exceed: str = "warn"
    train_cap: int = 3000            # training samples per label and subset the baselines learn from
    top_ngrams: int = 8              # n-grams recorded per label (word weights, z-test)
    seed: int = 0                    # the training subsample and the regressions
    # The panel (automon.data.audit_panel.MEMBERS): word, char, minilm, length. Every member counts
    # for the ceiling and for on_exceed. The build leaves minilm out for time (loading and encoding
    # cost 12-37 s on 2 cores); data_build/audit.py runs all four (conf/audit.yaml).
    members: List[str] = field(default_factory=lambda: ["word", "char", "length"])
    # Training samples per label for members slower than word's TF-IDF (else train_cap).
    member_caps: Dict[str, int] = field(default_factory=lambda: {"char": 500})
    char_max_chars: int = 1000       # the char member reads a response's first and last 500 characters
    # minilm: pair-grouped CV on at most this many seeded test pairs per subset (null: all). Encoding
    # all 3,010 test responses takes 1-2 min on 2 CPU cores, 50 pairs per subset about a sixth of
    # that (the build log prints it); embeddings are cached by the texts' hash ($AUTOMON_CACHE/audit_minilm).
    minilm_pairs: Optional[int] = 50
    minilm_max_length: int = 128     # tokens per response (head and tail kept)
    cv_folds: int = 5                # minilm: folds of its pair-grouped cross-validation
    embedding_cache: bool = True     # minilm: reuse embeddings cached by encoder and text hash
    z_min_count: int = 5             # z-test: n-grams in at least this many test responses
    z_alpha: float = 0.05            # z-test: two-sided, Bonferroni-corrected over the n-grams tested
    # AFLite's hard subset of test pairs (audit_panel.aflite; adversaries word and char, the other
    # members held out); its pair ids go into the manifest (audit.subsets.<s>.hard_subset.pair_ids).
    hard_subset: bool = True
    hard_splits: int = 64            # AFLite's random splits per round
    hard_tau: float = 0.75           # predictability at or above which a pair is filtered out


@dataclass
class BuildConfig:
    out: str = DEFAULT_BUILD_DIR  # the build directory (written whole, or not at all)
    overwrite: bool = False      # replace an existing build at out
    seed: int = 0                # every random choice of the build
    generator: str = "template"  # template (model-free) | policy (a model answers: the `policy` node)
    subsets: List[str] = field(default_factory=subset_names)  # which subsets to build (default: all)
    # Training variants per item for cue/incentive recipes (different wordings of one source item).
    train_variants: int = 2
    # Benchmark knob: clone every training item this many times with distinct ids (1 = off).
    scale: int = 1
    sources: SourcesConfig = field(default_factory=SourcesConfig)
    test: TestSizes = field(default_factory=TestSizes)  # test pairs per subset (test.<subset>=N)
    wordings: WordingsConfig = field(default_factory=WordingsConfig)  # the phrase lists of conf/wordings/<v>.yaml
    disjoint: DisjointConfig = field(default_factory=DisjointConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    sg_code: SgCodeConfig = field(default_factory=SgCodeConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # used by generator=policy only


@dataclass
class AuditRunConfig:
    """data_build/audit.py: the shortcut audit of an existing build."""
    build: str = MISSING            # the build directory (manifest.json, train.jsonl, test.jsonl)
    audit: AuditConfig = field(default_factory=AuditConfig)
    # Where audit.json, audit.md and audit.png go. Null: <build>/audit. The build's own files (and so
    # its manifest hash, which trained adapters and evaluations record) are never changed.
    out: Optional[str] = None


def build_schema() -> type:
    """BuildConfig with its `test` and `wordings` nodes typed for the subsets registered now (one
    registered at runtime, e.g. by a test, appears in the schema stored by the next `register()`)."""
    sizes, wordings = test_sizes_schema(), wordings_schema()
    same_sizes = [(f.name, f.default) for f in fields(sizes)] == [(f.name, f.default) for f in fields(TestSizes)]
    if same_sizes and same_schema(wordings, WordingsConfig):
        return BuildConfig
    # Redefining a node in a subclass keeps its place in the field order (and in the manifest).
    return make_dataclass("BuildConfig", [("test", sizes, field(default_factory=sizes)),
                                          ("wordings", wordings, field(default_factory=wordings))], bases=(BuildConfig,))


def register(cs: ConfigStore | None = None) -> None:
    cs = cs or ConfigStore.instance()
    register_help()
    cs.store(name="build_schema", node=build_schema())
    cs.store(name="audit_schema", node=AuditRunConfig)
    cs.store(group="wordings", name="wordings_schema", node=wordings_schema())
    cs.store(group="sg_code", name="sg_code_schema", node=SgCodeConfig)
