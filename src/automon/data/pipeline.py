"""The data build: read sources -> recipes -> test pairs -> disjoint training split -> files.

Entry point: `run_build(cfg)` (data_build/build.py is a thin Hydra wrapper around it).
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from automon.data.card import dataset_card
from automon.data.disjoint import find_conflicts, verify_build
from automon.data.io import write_build
from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import short_hash
from automon.data.status import config_identity, status
from automon.schema import SUBSETS, Sample
from automon.sources import SourceError, read_source, source_origin
from automon.versions import code_version, library_versions

log = logging.getLogger("automon.data")
BUILD_VERSION = "build-v1"


class BuildError(RuntimeError):
    """A build that cannot be completed as configured; the message says what to change."""


@dataclass
class BuildContext:
    cfg: Any
    drops: Drops = field(default_factory=Drops)
    malformed: dict = field(default_factory=dict)
    timings: "OrderedDict[str, float]" = field(default_factory=OrderedDict)
    sources_used: set = field(default_factory=set)
    _rows: dict = field(default_factory=dict)

    def rows(self, name: str) -> list:
        # Read each source once: TruthfulQA feeds two recipes, and a second read would also count
        # its skipped malformed rows twice.
        if name not in self._rows:
            self.sources_used.add(name)
            src = self.cfg.sources
            self._rows[name] = list(read_source(name, src.root, src.on_malformed, self.malformed,
                                                src.revisions.get(name)))
        return self._rows[name]

    def timed(self, stage: str, fn: Callable, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - t0


def _recipe_items(ctx: BuildContext, subset: str) -> list[Item]:
    cfg, w, seed, v, drops = ctx.cfg, ctx.cfg.wordings, ctx.cfg.seed, ctx.cfg.train_variants, ctx.drops
    if subset == "safety_qa":
        from automon.data.recipes.safety import safety_qa_items
        return safety_qa_items(ctx.rows("hh_rlhf_harmless"), drops)
    if subset == "safety_code":
        from automon.data.recipes.safety import safety_code_items
        return safety_code_items(ctx.rows("sven"), ctx.rows("cyberseceval_instruct"),
                                 ctx.rows("cyberseceval_autocomplete"), ctx.rows("securityeval"), drops)
    if subset == "syco_qa":
        from automon.data.recipes.sycophancy import syco_qa_items
        return syco_qa_items(ctx.rows("mmlu"), ctx.rows("truthfulqa"), ctx.rows("rh_sycophancy_fact"),
                             ctx.rows("rh_sycophancy_fact_unhackable"), ctx.rows("rh_sycophancy_opinion_political"),
                             ctx.rows("caa_sycophancy"), ctx.rows("anthropic_political_typology"), w, seed, v, drops)
    if subset == "syco_reasoning":
        from automon.data.recipes.sycophancy import syco_reasoning_items
        return syco_reasoning_items(ctx.rows("gsm8k"), w, seed, v, drops)
    if subset == "sg_qa":
        from automon.data.recipes.sg_qa import sg_qa_items
        return sg_qa_items(ctx.rows("truthfulqa"), ctx.rows("rh_world_affecting_reward"),
                           ctx.rows("rh_world_affecting_approval"), ctx.rows("rh_email_assistant"),
                           ctx.rows("rh_email_assistant_unhackable"), ctx.rows("rh_theory_of_mind_mirroring_expanded"),
                           ctx.rows("rh_theory_of_mind_mirroring_unhackable"), w, seed, v, drops)
    if subset == "sg_code":
        from automon.data.recipes.sg_code import sg_code_items

        def data(name):
            return [dict(r.data, _ref=r.ref) for r in ctx.rows(name)]
        return sg_code_items(data("humaneval"), data("mbpp"), data("rh_code_problems_hardcoded"),
                             data("rh_code_selection"), data("rh_code_selection_unhackable"), cfg.sg_code,
                             list(w.sg_code_incentives), seed, drops)
    raise BuildError(f"unknown subset {subset!r}; valid: {', '.join(SUBSETS)}")


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
    """Build `cfg.out`; returns the manifest. Raises BuildError / SourceError with what to do."""
    t_start = time.perf_counter()
    ctx = BuildContext(cfg)
    unknown = [s for s in cfg.subsets if s not in SUBSETS]
    if unknown:
        raise BuildError(f"unknown subset(s) {unknown}; valid: {', '.join(SUBSETS)}")
    if cfg.generator != "template":
        raise BuildError(f"generator={cfg.generator!r} is not available in the data build yet; use generator=template")
    if cfg.sources.root is not None and not Path(cfg.sources.root).is_dir():
        raise BuildError(f"sources.root={cfg.sources.root} is not a directory; point it at shared/data/raw, "
                         "or leave it unset to read from the Hugging Face hub")
    out = Path(cfg.out)
    if out.exists() and not cfg.overwrite:
        st = status(cfg)  # the same answer pipeline.py acts on
        raise BuildError(f"{out} already exists ({st}); pass overwrite=true to replace it, or choose another out=")

    items_by_subset: dict[str, list[Item]] = OrderedDict()
    for subset in SUBSETS:  # canonical order, whatever order the config lists them in
        if subset in cfg.subsets:
            items_by_subset[subset] = ctx.timed(f"recipe:{subset}", _recipe_items, ctx, subset)
            log.info("%s: %d items", subset, len(items_by_subset[subset]))

    sizes = {s: int(getattr(cfg.test, s)) for s in items_by_subset}
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
    for split, samples in (("train", train), ("test", test)):
        ids = [s.id for s in samples]
        if len(set(ids)) != len(ids):
            raise BuildError(f"duplicate sample ids in {split}; a recipe gives two samples the same variant")
    if {s.id for s in train} & {s.id for s in test}:
        raise BuildError("a sample id appears in both splits")

    d = cfg.disjoint
    if d.on_conflict not in ("drop", "fail"):
        raise BuildError(f"disjoint.on_conflict must be drop or fail, got {d.on_conflict!r}")
    memo: dict = {}
    report = ctx.timed("disjoint", find_conflicts, train, test, d.ngram, d.num_perm, d.threshold, d.workers, memo)
    if report.conflicts and d.on_conflict == "fail":
        lines = [f"  {c.kind}: train {c.train_id} vs test {c.test_id} {c.detail}" for c in report.conflicts[:20]]
        raise BuildError(f"{len(report.conflicts)} training samples collide with the test set "
                         f"({report.by_kind()}):\n" + "\n".join(lines) +
                         "\nRerun with disjoint.on_conflict=drop to remove them (they are counted in the manifest).")
    bad = report.train_ids()
    train = [s for s in train if s.id not in bad]
    for c in report.conflicts:
        ctx.drops.add("train", f"disjoint_{c.kind}")

    manifest = {
        "build_version": BUILD_VERSION,
        "code_version": code_version(),
        "libraries": library_versions(("datasketch", "numpy", "hydra-core", "omegaconf")),
        "seed": cfg.seed,
        # out/overwrite say where, not what: leave them out so two identical builds hash the same.
        "config": config_identity(cfg),
        "sources": {name: source_origin(name, cfg.sources.root, cfg.sources.revisions.get(name))
                    for name in sorted(ctx.sources_used)},
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
    # Timings are NOT in the manifest: they would break byte-identical rebuilds. They go to
    # build_log.json beside it (not covered by the manifest) and to the log.
    def before_commit(tmp: Path) -> None:
        if d.verify_after_write:
            final = ctx.timed("verify", verify_build, tmp, d.ngram, d.num_perm, d.threshold, d.workers, memo)
            if final.conflicts:
                raise BuildError(f"post-write disjointness check failed: {final.by_kind()} e.g. "
                                 f"{final.conflicts[0].to_dict()}; nothing was written to {out}")
        ctx.timings["total"] = time.perf_counter() - t_start
        (tmp / "build_log.json").write_text(json.dumps(
            {"timings_s": {k: round(v, 3) for k, v in ctx.timings.items()}, "n_train": len(train),
             "n_test": len(test)}, indent=2) + "\n")

    t_write = time.perf_counter()
    written = write_build(out, train, test, manifest, overwrite=cfg.overwrite,
                          extra_files={"README.md": dataset_card}, before_commit=before_commit)
    ctx.timings["write+verify"] = time.perf_counter() - t_write
    for stage, secs in ctx.timings.items():
        log.info("stage %-22s %7.2f s", stage, secs)
    return written


__all__ = ["run_build", "BuildError", "SourceError", "select_test", "BUILD_VERSION"]
