"""The data build: read sources -> recipes -> test pairs -> disjoint training split -> files.

Entry point: `run_build(cfg)` (data_build/build.py is a thin Hydra wrapper around it).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from automon.data.audit import audit, exceed_message
from automon.data.audit import plot as plot_audit
from automon.data.card import dataset_card
from automon.data.disjoint import find_conflicts, minhash_signatures, sample_text, verify_build
from automon.data.forked import Forked
from automon.data.io import atomic_dir, write_manifest_files, write_sample_files
from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import short_hash
from automon.errors import UserError, at_least, one_of
from automon.data.status import config_identity, status
from automon.schema import SUBSETS, Sample
from automon.subsets import SubsetSpec, specs
from automon.sources import SOURCES, SourceError, read_source, source_origin
from automon.sources.checksums import ON_MISMATCH, ChecksumList, default_list, load_list
from automon.sources.read import ON_MALFORMED
from automon.sources.synthetic import synthetic_marker
from automon.versions import code_version, library_versions

log = logging.getLogger("automon.data")
BUILD_VERSION = "build-v1"


class BuildError(UserError, RuntimeError):
    """A build that cannot be completed as configured; the message says what to change."""


@dataclass
class BuildContext:
    cfg: Any
    drops: Drops = field(default_factory=Drops)
    malformed: dict = field(default_factory=dict)
    timings: "OrderedDict[str, float]" = field(default_factory=OrderedDict)
    sources_used: set = field(default_factory=set)
    checksums: ChecksumList | None = None
    digests: dict = field(default_factory=dict)       # relative path -> sha256 of every file read
    policy: Any = None                                 # automon.policy.run.Policy (generator=policy)
    policy_report: dict = field(default_factory=dict)  # subset -> funnel / labels of the policy step
    differences: dict = field(default_factory=dict)   # relative path -> listed / actual sha256
    _rows: dict = field(default_factory=dict)

    def rows(self, name: str) -> list:
        # Read each source once: TruthfulQA feeds two recipes, and a second read would also count
        # its skipped malformed rows twice.
        if name not in self._rows:
            self.sources_used.add(name)
            src = self.cfg.sources
            self._rows[name] = list(read_source(name, src.root, src.on_malformed, self.malformed,
                                                src.revisions.get(name), on_file=self._check_file))
        return self._rows[name]

    def read_sources(self, subsets) -> None:
        """Read and check every source the chosen subsets' specs declare, before the first recipe runs,
        so a bad source file fails in seconds, not after the slow recipes (RecipeContext.rows refuses
        a source its spec does not declare)."""
        for name in OrderedDict.fromkeys(n for spec in specs() if spec.name in subsets for n in spec.sources):
            self.rows(name)

    def _check_file(self, path: Path, rel: str, digest: str) -> None:
        """Record a source file's sha256 (for the manifest) and compare it with the checksum list."""
        self.digests[rel] = digest
        if self.checksums is None:
            return
        expected = self.checksums.expected(path)
        if expected == digest:
            return
        self.differences[rel] = {"listed": expected, "actual": digest}
        lst = self.checksums.path
        what = (f"source file {rel} is not in {lst}" if expected is None else
                f"source file {rel} differs from {lst} (sha256 {digest[:12]}..., listed {expected[:12]}...)")
        if self.cfg.sources.on_checksum == "fail":
            raise SourceError(what, str(path), "restore the file; if the change is intended, update the list "
                              "(sha256sum) or rerun with sources.on_checksum=warn")
        log.warning("%s; going on (sources.on_checksum=warn)", what)

    def timed(self, stage: str, fn: Callable, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - t0


@dataclass
class RecipeContext:
    """What a subset's recipe (SubsetSpec.recipe) sees: the build config, the drop counters, and the
    rows of the sources its spec declares (read once per build, shared with other recipes)."""
    build: BuildContext
    spec: SubsetSpec
    # A background recipe (a forked process) counts into its own Drops, sent back with its items.
    own_drops: Drops | None = None

    @property
    def cfg(self) -> Any:
        return self.build.cfg

    @property
    def drops(self) -> Drops:
        return self.build.drops if self.own_drops is None else self.own_drops

    def rows(self, name: str) -> list:
        if name not in self.spec.sources:
            raise BuildError(f"the {self.spec.name} recipe reads source {name!r}, which its SubsetSpec does not "
                             f"declare (sources={self.spec.sources}); add it there (automon/subsets.py)")
        return self.build.rows(name)


def _recipe_items(ctx: BuildContext, spec: SubsetSpec, own_drops: Drops | None = None) -> list[Item]:
    rctx = RecipeContext(ctx, spec, own_drops)
    items = spec.load_recipe()(rctx)
    stray = sorted({it.subset for it in items} - {spec.name})
    if stray:
        raise BuildError(f"the {spec.name} recipe returned items of subset(s) {stray}; an Item's subset must "
                         f"be the spec's name")
    if ctx.policy is not None and spec.name in ctx.cfg.policy.subsets:
        # generator=policy: the template items' test pairs are rewritten by the policy model.
        from automon.policy.recipes import policy_recipe

        report = ctx.policy_report.setdefault(spec.name, {})
        items = ctx.timed(f"policy:{spec.name}", policy_recipe(spec.name), rctx, items, ctx.policy, report)
    return items


def _run_recipes(ctx: BuildContext, chosen: list[SubsetSpec],
                 while_waiting: Callable[[dict[str, list[Item]], Callable[[], bool]], None] | None = None
                 ) -> "OrderedDict[str, list[Item]]":
    """subset -> its recipe's items, in the registry's order whatever order the config lists them in.

    Recipes marked `background` (sg_code: Python planning, then a sandbox) run in forked processes
    while the others run here, so they share neither the GIL nor a core's idle time. Each counts its
    drops apart and sends them back with its items, so the build is the same as a serial one.
    `while_waiting(items so far, finished)` runs once the others are done and a background recipe is
    not: work that may start early, which should stop when `finished()` turns true."""
    background = [spec for spec in chosen if spec.background and ctx.policy is None]
    forks = {spec.name: Forked(_recipe_in_child, ctx, spec, name=f"recipe:{spec.name}") for spec in background}
    results: dict[str, list[Item]] = {}
    try:
        for spec in chosen:
            if spec.name not in forks:
                results[spec.name] = ctx.timed(f"recipe:{spec.name}", _recipe_items, ctx, spec)
                log.info("%s: %d items", spec.name, len(results[spec.name]))
        if while_waiting is not None and forks and not all(f.done() for f in forks.values()):
            _at_lowest_priority(while_waiting, dict(results), lambda: all(f.done() for f in forks.values()))
        for name, fork in forks.items():
            (results[name], drops), ctx.timings[f"recipe:{name}"] = fork.result()
            ctx.drops.update(drops)
            log.info("%s: %d items", name, len(results[name]))
    finally:
        for fork in forks.values():
            fork.close()
    return OrderedDict((spec.name, results[spec.name]) for spec in chosen)


def _at_lowest_priority(fn: Callable[..., None], *args: Any) -> None:
    """fn(*args) in a thread at nice 19 (Linux applies nice per thread), waited for: work that should
    use only the cycles the background recipes leave idle, never slow them down. Where the priority
    cannot be set, it runs at the caller's."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (OSError, AttributeError):
            pass
        try:
            fn(*args)
        except BaseException as e:  # re-raised in the caller
            errors.append(e)

    t = threading.Thread(target=run, name="lowest-priority", daemon=True)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def _warm_minhash(items: dict[str, list[Item]], d, memo: dict, finished: Callable[[], bool],
                  chunk: int = 1000) -> None:
    """While sg_code's recipe still runs, compute the MinHash signatures the disjointness check will
    need for the other subsets' samples (request + response, and each request alone) in this process,
    a chunk at a time, until the recipe is done; the check then computes only what is left. The
    signatures depend on the text alone, so this changes no result, only when the work is done."""
    texts: dict[str, None] = {}
    requests: dict[str, None] = {}
    for its in items.values():
        for it in its:
            for dr in (*(it.test_pair or ()), *it.train):
                texts[sample_text(dr)] = None
                requests[dr.request] = None
    todo = list(texts) + list(requests)
    for i in range(0, len(todo), chunk):
        if finished():
            return
        minhash_signatures(todo[i:i + chunk], d.ngram, d.num_perm, workers=1, memo=memo)


def _recipe_in_child(ctx: BuildContext, spec: SubsetSpec) -> tuple[list[Item], Drops]:
    drops = Drops()
    return _recipe_items(ctx, spec, drops), drops


def _sample(item: Item, d: Draft, split: str, pair_id: str | None) -> Sample:
    category, task = SUBSETS[item.subset]
    recipe = d.meta.get("recipe", "")
    sid = short_hash(item.source, item.subset, recipe, d.variant, d.label, n=16)
    meta = dict(d.meta, item_keys=list(item.keys))
    return Sample(sid, pair_id, split, category, task, item.subset, item.source, d.request, d.response, d.label,
                  list(d.evidence), meta).validate()


def _clone(item: Item, k: int) -> Item:
    """Benchmark scaling: the same item under distinct keys / ids (never test-eligible)."""
    return Item(tuple(f"{key}#copy{k}" for key in item.keys), item.subset, f"{item.source}#copy{k}", None,
                item.train)


def select_test(items_by_subset: dict[str, list[Item]], sizes: dict[str, int], seed: int,
                drops: Drops) -> set[int]:
    """Pick test items per subset (seeded, order-independent); returns their ids (id(item))."""
    claimed: set[str] = set()
    chosen: set[int] = set()
    for subset, items in items_by_subset.items():
        need = sizes[subset]
        eligible = [it for it in items if it.test_pair is not None]
        eligible.sort(key=lambda it: short_hash(seed, subset, it.keys[0], n=16))
        got = 0
        for it in eligible:
            if got == need:
                break
            if any(k in claimed for k in it.keys):
                drops.add(subset, "test_candidate_key_already_in_test")
                continue
            claimed.update(it.keys)
            chosen.add(id(it))
            got += 1
        if got < need:
            raise BuildError(f"{subset}: only {got} test pairs available, {need} requested "
                             f"(test.{subset}={need}); lower it or add sources")
    return chosen


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
    if "sg_code" in cfg.subsets:
        from automon.config.sg_code import STRATEGIES

        unknown = [s for s in cfg.sg_code.strategies if s not in STRATEGIES]
        if unknown or not cfg.sg_code.strategies:
            raise BuildError(f"sg_code.strategies={list(cfg.sg_code.strategies)} is empty or names unknown strategies "
                             f"{unknown}", "sg_code.strategies", f"name some of: {', '.join(STRATEGIES)}")
        for key in ("visible_tests", "train_strategies_per_item", "workers", "memory_mb"):
            at_least(f"sg_code.{key}", getattr(cfg.sg_code, key), 1, BuildError)
        if cfg.sg_code.timeout_s <= 0:
            raise BuildError(f"sg_code.timeout_s={cfg.sg_code.timeout_s} is out of range", "sg_code.timeout_s",
                             "use a positive number of CPU seconds")


def _check_policy(cfg) -> None:
    from automon.policy.recipes import POLICY_SUBSETS
    from automon.policy.run import backend_config, model_config

    p = cfg.policy
    bad = [s for s in p.subsets if s not in POLICY_SUBSETS]
    if bad or not p.subsets:
        raise BuildError(f"policy.subsets={list(p.subsets)} is empty or names subsets without a policy generator "
                         f"{bad}", "policy.subsets", f"name some of: {', '.join(POLICY_SUBSETS)}")
    missing = [s for s in p.subsets if s not in cfg.subsets]
    if missing:
        raise BuildError(f"policy.subsets names {missing}, which this build does not build (subsets="
                         f"{list(cfg.subsets)})", "policy.subsets", "add them to subsets or drop them here")
    if p.max_items_per_source is not None:
        at_least("policy.max_items_per_source", p.max_items_per_source, 1, BuildError)
    at_least("policy.max_new_tokens", p.max_new_tokens, 1, BuildError)
    model_config(p.model)  # typos in the model or backend fail here, before any source is read
    backend_config(p.backend, dict(p.backend_args or {}))


def _checksum_list(cfg) -> ChecksumList | None:
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


def run_build(cfg) -> dict:
    """Build `cfg.out`; returns the manifest. Raises BuildError / SourceError with what to do.

    Everything knowable at start fails first, in this order: the config, the sources root and the
    checksum list, whether `out` can be written (before any work), then every source file (read
    and checked once); only then do the recipes run. Output goes to a temp dir that replaces `out`
    when complete, so a failure or a kill leaves nothing half-done.
    """
    t_start = time.perf_counter()
    check_config(cfg)
    if cfg.sources.root is not None and not Path(cfg.sources.root).is_dir():
        raise BuildError(f"sources.root={cfg.sources.root} is not a directory; point it at shared/data/raw, "
                         "or leave it unset to read from the Hugging Face hub")
    ctx = BuildContext(cfg, checksums=_checksum_list(cfg))
    if cfg.generator == "policy":
        from automon.policy.run import Policy

        ctx.policy = Policy(cfg.policy)  # the model loads when the first subset asks it
    out = Path(cfg.out)
    if out.exists() and not cfg.overwrite:
        st = status(cfg)  # the same answer pipeline.py acts on
        raise BuildError(f"{out} already exists ({st}); pass overwrite=true to replace it, or choose another out=")
    if out.is_dir() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise BuildError(f"out={out} is a directory with files but not a data build (no manifest.json)", None,
                         "refusing to replace it; choose another out=")
    try:
        with atomic_dir(out, overwrite=cfg.overwrite) as tmp:
            ctx.timed("sources", ctx.read_sources, cfg.subsets)
            written = _build(ctx, tmp, t_start)
    finally:
        if ctx.policy is not None:
            ctx.policy.close()
    for stage, secs in ctx.timings.items():
        log.info("stage %-22s %7.2f s", stage, secs)
    return written


def _build(ctx: BuildContext, tmp: Path, t_start: float) -> dict:
    """Recipes -> test pairs -> disjoint training split -> the build's files in `tmp`."""
    cfg = ctx.cfg
    d = cfg.disjoint
    memo: dict = {}  # MinHash signatures by text, shared by the filter, the post-write check and the warm-up

    def warm_up(items: dict[str, list[Item]], finished: Callable[[], bool]) -> None:
        ctx.timed("disjoint warm-up", _warm_minhash, items, d, memo, finished)

    items_by_subset = _run_recipes(ctx, [spec for spec in specs() if spec.name in cfg.subsets], warm_up)

    sizes = {s: int(getattr(cfg.test, s)) for s in items_by_subset}
    for subset, report in ctx.policy_report.items():
        have = sum(it.test_pair is not None for it in items_by_subset[subset])
        if have < sizes[subset]:
            raise BuildError(f"{subset}: the policy gave {have} test pairs, {sizes[subset]} requested "
                             f"(test.{subset}={sizes[subset]}); policy funnel: {report}", f"test.{subset}",
                             "lower it, raise policy.max_items_per_source, or use a stronger policy.model")
    chosen = ctx.timed("split", select_test, items_by_subset, sizes, cfg.seed, ctx.drops)
    test_keys = {k for items in items_by_subset.values() for it in items if id(it) in chosen for k in it.keys}

    def materialise():
        test, train = [], []
        for subset, items in items_by_subset.items():
            picked = [it for it in items if id(it) in chosen]
            picked.sort(key=lambda it: short_hash(cfg.seed, subset, it.keys[0], n=16))
            for it in picked:
                mis, ben = it.test_pair
                pid = short_hash(it.source, subset, "pair", mis.variant, n=16)
                test += [_sample(it, mis, "test", pid), _sample(it, ben, "test", pid)]
            for it in items:
                if id(it) in chosen:
                    continue
                clones = [it] + [_clone(it, k) for k in range(2, cfg.scale + 1)]
                for c in clones:
                    if any(k in test_keys for k in c.keys):
                        ctx.drops.add(subset, "train_item_shares_key_with_test")
                        continue
                    variants = {}
                    for d in c.train:
                        variants.setdefault(d.variant, set()).add(d.label)
                    for d in c.train:
                        paired = variants[d.variant] == {0, 1}
                        pid = short_hash(c.source, subset, "pair", d.variant, n=16) if paired else None
                        train.append(_sample(c, d, "train", pid))
        return train, test

    train, test = ctx.timed("materialise", materialise)
    # Source ids are checked for duplicates as they are read; this catches a recipe that gives two
    # samples the same id.
    first: dict[str, Sample] = {}
    for s in train + test:
        other = first.setdefault(s.id, s)
        if other is not s:
            raise BuildError(f"two samples have the id {s.id}: {other.split} {other.source} and {s.split} {s.source}",
                             None, "a recipe gives two samples the same variant; report it with these sources")

    report = ctx.timed("disjoint", find_conflicts, train, test, d.ngram, d.num_perm, d.threshold, d.workers, memo)
    if report.conflicts and d.on_conflict == "fail":
        for c in report.conflicts[:20]:
            log.error("conflict %s: train %s vs test %s %s", c.kind, c.train_id, c.test_id, c.detail)
        c = report.conflicts[0]
        raise BuildError(f"{len(report.conflicts)} training samples collide with the test set ({report.by_kind()}), "
                         f"e.g. {c.kind}: train {c.train_id} vs test {c.test_id} (more in the log above)", None,
                         "rerun with disjoint.on_conflict=drop to remove them (they are counted in the manifest)")
    bad = report.train_ids()
    train = [s for s in train if s.id not in bad]
    for c in report.conflicts:
        ctx.drops.add("train", f"disjoint_{c.kind}")

    # The sample files first, then the post-write verification in a forked process while the audit
    # runs and the manifest and card are written here (both need a few seconds of one core each).
    t_write = time.perf_counter()
    verifying = None
    try:
        files = write_sample_files(tmp, train, test)
        if d.verify_after_write:
            # The child inherits memo (the filter's MinHash signatures, a pure function of each text)
            # and re-reads the files itself: it shares nothing else with the filter.
            verifying = Forked(verify_build, tmp, d.ngram, d.num_perm, d.threshold, d.workers, memo,
                               name="post-write verification")
        written = _write_manifest(ctx, tmp, train, test, files, sizes, report, bad, test_keys)
        if verifying is not None:
            final, ctx.timings["verify"] = verifying.result()
            if final.conflicts:
                raise BuildError(f"post-write disjointness check failed: {final.by_kind()} e.g. "
                                 f"{final.conflicts[0].to_dict()}; nothing was written to {cfg.out}")
        ctx.timings["write+verify"] = time.perf_counter() - t_write
        # Timings are NOT in the manifest: they would break byte-identical rebuilds. They go to
        # build_log.json beside it (not covered by the manifest) and to the log.
        ctx.timings["total"] = time.perf_counter() - t_start
        log_ = {"timings_s": {k: round(v, 3) for k, v in ctx.timings.items()}, "n_train": len(train),
                "n_test": len(test)}
        if ctx.policy is not None:  # cached vs generated answers differ between runs: not in the manifest
            log_["policy_generation"] = {k: round(v, 3) for k, v in ctx.policy.stats.items()}
        (tmp / "build_log.json").write_text(json.dumps(log_, indent=2) + "\n")
    except OSError as e:
        raise BuildError(f"cannot write the build: {e.strerror}", e.filename,
                         "free some space (or quota) there, or choose another out=") from e
    finally:
        if verifying is not None:
            verifying.close()
    return written


def _write_manifest(ctx: BuildContext, tmp: Path, train: list[Sample], test: list[Sample], files: dict[str, str],
                    sizes: dict[str, int], report, bad: set[str], test_keys: set[str]) -> dict:
    """The shortcut audit (which may stop the build), then manifest.json, the card and audit.png."""
    cfg, d = ctx.cfg, ctx.cfg.disjoint
    audit_result = None
    if cfg.audit.enabled:
        audit_result = ctx.timed("audit", audit, train, test, cfg.audit)
        if audit_result["exceeding"]:
            msg = exceed_message(audit_result)
            if cfg.audit.on_exceed == "fail":
                raise BuildError(msg, None, "change the templates of those subsets (a new wordings version) so both "
                                            "labels read alike, or pass audit.on_exceed=warn to build anyway")
            log.warning("%s", msg)
    manifest = {
        "build_version": BUILD_VERSION,
        "code_version": code_version(),
        "libraries": library_versions(("datasketch", "numpy", "hydra-core", "omegaconf")),
        "seed": cfg.seed,
        # out/overwrite say where, not what: leave them out so two identical builds hash the same.
        "config": config_identity(cfg),
        "sources": {name: source_origin(name, cfg.sources.root, cfg.sources.revisions.get(name), ctx.digests)
                    for name in sorted(ctx.sources_used)},
        "source_checksums": {"list": str(ctx.checksums.path) if ctx.checksums else None,
                             "on_mismatch": cfg.sources.on_checksum,
                             "differences": dict(sorted(ctx.differences.items()))},
        "malformed_rows_skipped": dict(sorted(ctx.malformed.items())),
        "dropped": dict(sorted(ctx.drops.items())),
        "disjointness": {
            "params": report.params,
            "conflicts_found": report.by_kind(),
            "conflicts_dropped": len(bad),
            "conflict_examples": [c.to_dict() for c in report.conflicts[:50]],
            "on_conflict": d.on_conflict,
            "source_item_keys_in_test": len(test_keys),
        },
        "test_pairs": sizes,
    }
    isolation = Counter(s.meta["verification"]["isolation"] for s in train + test
                        if isinstance(s.meta.get("verification"), dict) and "isolation" in s.meta["verification"])
    if isolation:  # how the code that was run to label samples was isolated (docs/security.md)
        manifest["sandbox_isolation"] = dict(sorted(isolation.items()))
    controls = Counter(f"{s.subset}/{s.meta['control']}" for s in train if s.meta.get("control"))
    if controls:  # training-only benign controls (wordings.training_controls)
        manifest["controls"] = dict(sorted(controls.items()))
    if audit_result is not None:
        manifest["audit"] = audit_result
    marker = synthetic_marker(cfg.sources.root)
    if marker:  # only then, so that a real build's manifest is unchanged
        manifest["synthetic_sources"] = marker
    if ctx.policy is not None:
        manifest["policy"] = {"generator": ctx.policy.describe(), "subsets": ctx.policy_report}
    written = write_manifest_files(tmp, manifest, files, train + test, extra_files={"README.md": dataset_card})
    if audit_result is not None:
        plot_audit(audit_result, tmp / "audit.png")
    return written


__all__ = ["run_build", "BuildError", "SourceError", "select_test", "BUILD_VERSION"]
