"""The data build: read sources -> recipes -> test pairs -> disjoint training split -> files.

Entry point: `run_build(cfg)` (data_build/build.py is a thin Hydra wrapper around it). The parts:
check (what the build refuses before reading anything), context (running the recipes), this module
(test pairs, the training split, the disjointness filter), write (the files), identity (what the
manifest records, shared with status).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from automon.data.check import BuildError, check_config, checksum_list
from automon.data.context import BuildContext, run_recipes, warm_minhash
from automon.data.disjoint import find_conflicts
from automon.data.identity import BUILD_VERSION
from automon.data.io import atomic_dir
from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import short_hash
from automon.data.status import status
from automon.data.write import write_verified_build
from automon.schema import SUBSETS, Sample
from automon.sources import SourceError
from automon.subsets import specs

log = logging.getLogger("automon.data")


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
    ctx = BuildContext(cfg, checksums=checksum_list(cfg))
    if cfg.generator == "policy":
        from automon.policy.run import Policy  # the policy package (and its backends) only for generator=policy

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
        ctx.timed("disjoint warm-up", warm_minhash, items, d, memo, finished)

    items_by_subset = run_recipes(ctx, [spec for spec in specs() if spec.name in cfg.subsets], warm_up)

    sizes = {s: int(getattr(cfg.test, s)) for s in items_by_subset}
    for subset, cap in ctx.test_caps.items():
        if sizes.get(subset, 0) > cap:
            log.warning("%s: %d test pairs requested, only %d are annotated and kept; the build ships %d "
                        "(the manifest and card say so)", subset, sizes[subset], cap, cap)
            sizes[subset] = cap
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
                # contrast controls (v9): a pair_id of their own (no twin: pair accuracy skips them),
                # grouped with the pair of their source item (the bootstrap resamples the group)
                test += [_sample(it, replace(c, meta={**c.meta, "group": pid}), "test",
                                 short_hash(it.source, subset, "control", c.variant, n=16)) for c in it.test_controls]
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
    return write_verified_build(ctx, tmp, train, test, sizes, report, bad, test_keys, memo, t_start)


__all__ = ["run_build", "BuildError", "SourceError", "select_test", "BUILD_VERSION"]
