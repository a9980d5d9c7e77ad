"""What the build refuses before it reads anything: `check_config(cfg)`, and `BuildError`, the
error of a build that cannot be completed as configured."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from automon.errors import UserError, at_least, one_of
from automon.sandbox.isolation import MODES
from automon.schema import SUBSETS
from automon.sources import SOURCES
from automon.sources.checksums import ON_MISMATCH, ChecksumList, default_list, load_list
from automon.sources.read import ON_MALFORMED
from automon.subsets import get as subset_spec
from automon.subsets import policy_subsets


class BuildError(UserError, RuntimeError):
    """A build that cannot be completed as configured; the message says what to change."""


def check_config(cfg) -> None:
    """Every config value the build can judge without reading anything (milliseconds)."""
    if not cfg.subsets:
        raise BuildError("subsets is empty", "subsets", f"name at least one of: {', '.join(SUBSETS)}")
    unknown = [s for s in cfg.subsets if s not in SUBSETS]
    if unknown:
        raise BuildError(f"unknown subset(s) {unknown}; valid: {', '.join(SUBSETS)}")
    unsized = [s for s in cfg.subsets if getattr(cfg.test, s, None) is None]
    if unsized:  # a subset registered at runtime after the config schema was stored
        raise BuildError(f"the config has no test.<name> size for {unsized}: compose it after "
                         "automon.config.build.register() has run with those subsets registered")
    one_of("generator", cfg.generator, ("template", "policy"), BuildError)
    one_of("sandbox.isolation", cfg.sandbox.isolation, ("auto", *MODES), BuildError)
    if cfg.generator == "policy":
        _check_policy(cfg)
    one_of("sources.on_malformed", cfg.sources.on_malformed, ON_MALFORMED, BuildError)
    one_of("sources.on_checksum", cfg.sources.on_checksum, ON_MISMATCH, BuildError)
    one_of("disjoint.on_conflict", cfg.disjoint.on_conflict, ("drop", "fail"), BuildError)
    one_of("audit.on_exceed", cfg.audit.on_exceed, ("fail", "warn"), BuildError)
    at_least("audit.train_cap", cfg.audit.train_cap, 2, BuildError)
    for key in ("max_auroc", "max_pair_accuracy"):
        if not 0.5 <= getattr(cfg.audit, key) <= 1.0:
            raise BuildError(f"audit.{key}={getattr(cfg.audit, key)} is out of range", f"audit.{key}",
                             "use a value in [0.5, 1]: 0.5 is chance")
    a = cfg.audit
    at_least("seed", cfg.seed, 0, BuildError)
    for key, low in (("top_ngrams", 1), ("seed", 0), ("char_max_chars", 1), ("minilm_max_length", 8),
                     ("cv_folds", 2), ("z_min_count", 1), ("hard_splits", 1)):
        at_least(f"audit.{key}", getattr(a, key), low, BuildError)
    if a.minilm_pairs is not None:
        at_least("audit.minilm_pairs", a.minilm_pairs, 1, BuildError)
    for key, low, high in (("z_alpha", 0.0, 1.0), ("hard_tau", 0.0, 1.0)):
        v = getattr(a, key)
        if not low < v <= high:  # nan fails too
            raise BuildError(f"audit.{key}={v} is out of range", f"audit.{key}", f"use a value in ({low}, {high}]")
    if not a.members:
        raise BuildError("audit.members is empty", "audit.members", "name at least one baseline, e.g. [word]")
    for key in ("out", "sources.root", "sources.checksums"):
        value = OmegaConf.select(cfg, key)
        if value is not None and not str(value).strip():
            raise BuildError(f"{key}= is empty", key, f"give a path{'' if key == 'out' else f', or {key}=null'}")
    if not str(cfg.wordings.version).strip():
        raise BuildError("wordings.version= is empty", "wordings.version", "leave it as conf/wordings/v9.yaml sets it")
    for key, value in cfg.wordings.items():  # the phrase lists recipes choose from: never empty
        if OmegaConf.is_list(value) and len(value) == 0:
            raise BuildError(f"wordings.{key} is empty", f"wordings.{key}",
                             "give it values, or leave it as conf/wordings/v9.yaml sets it")
    unknown = [name for name in cfg.sources.revisions if name not in SOURCES]
    if unknown:
        raise BuildError(f"sources.revisions names unknown source(s) {unknown}", "sources.revisions",
                         f"use source names: {', '.join(SOURCES)}")
    for s in cfg.subsets:
        at_least(f"test.{s}", getattr(cfg.test, s), 0, BuildError)
    at_least("train_variants", cfg.train_variants, 1, BuildError)
    at_least("scale", cfg.scale, 1, BuildError)
    d = cfg.disjoint
    for key in ("ngram", "num_perm", "workers"):
        at_least(f"disjoint.{key}", getattr(d, key), 1, BuildError)
    if not 0 < d.threshold <= 1:
        raise BuildError(f"disjoint.threshold={d.threshold} is out of range", "disjoint.threshold",
                         "use an estimated Jaccard similarity in (0, 1]")
    for s in cfg.subsets:  # each subset's own settings (SubsetSpec.check)
        check = subset_spec(s).load_check()
        if check is not None:
            check(cfg, BuildError)


def _check_policy(cfg) -> None:
    # The policy package (and its backends) is imported only for generator=policy.
    from automon.policy.run import backend_config, model_config

    p = cfg.policy
    bad = [s for s in p.subsets if s not in policy_subsets()]
    if bad or not p.subsets:
        raise BuildError(f"policy.subsets={list(p.subsets)} is empty or names subsets without a policy generator "
                         f"{bad}", "policy.subsets", f"name some of: {', '.join(policy_subsets())}")
    missing = [s for s in p.subsets if s not in cfg.subsets]
    if missing:
        raise BuildError(f"policy.subsets names {missing}, which this build does not build (subsets="
                         f"{list(cfg.subsets)})", "policy.subsets", "add them to subsets or drop them here")
    if p.max_items_per_source is not None:
        at_least("policy.max_items_per_source", p.max_items_per_source, 1, BuildError)
    at_least("policy.max_new_tokens", p.max_new_tokens, 1, BuildError)
    at_least("policy.seed", p.seed, 0, BuildError)
    if not str(p.cache).strip():
        raise BuildError("policy.cache= is empty", "policy.cache", "give a directory (default data/cache/policy)")
    model_config(p.model)  # typos in the model or backend fail here, before any source is read
    backend_config(p.backend, dict(p.backend_args or {}))


def checksum_list(cfg) -> ChecksumList | None:
    """The list the source files are checked against: sources.checksums, else SHA256SUMS in or beside
    sources.root (None when there is none, or when sources come from the hub)."""
    src = cfg.sources
    if src.root is None:
        if src.checksums:
            raise BuildError("sources.checksums is set but sources.root is not", "sources.checksums",
                             "set sources.root to the local copy the list describes, or drop sources.checksums")
        return None
    if src.checksums and not Path(src.checksums).is_file():
        raise BuildError(f"no checksum list at {src.checksums}", "sources.checksums",
                         "fix the path, or leave it unset to use SHA256SUMS in sources.root")
    path = src.checksums or default_list(src.root)
    return load_list(path) if path else None
