"""How the build runs the recipes: the build's state (`BuildContext`), what a recipe sees
(`RecipeContext`), and `run_recipes`, which runs the chosen subsets' recipes (the slow sandboxed
ones in forked processes beside the others)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from automon.data.check import BuildError
from automon.data.disjoint import minhash_signatures, sample_text
from automon.data.forked import Forked
from automon.data.recipes.base import Drops, Item
from automon.sources import SourceError, read_source
from automon.sources.checksums import ChecksumList
from automon.subsets import SubsetSpec, specs

log = logging.getLogger("automon.data")


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
    # subset -> the most test pairs its recipe can give, where fewer than requested is expected and
    # reported rather than an error (the safety subsets' annotated pairs, wordings.safety_annotations)
    test_caps: dict = field(default_factory=dict)
    # subset -> the sandbox isolation mode its recipe's code ran under (RecipeContext.ran_code_under):
    # how this machine made the build, for build_log.json's build record, never for the samples
    isolation: dict = field(default_factory=dict)
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
    # A background recipe (a forked process) counts into its own Drops, sent back with its items
    # (and so the isolation mode it reports).
    own_drops: Drops | None = None
    own_isolation: dict | None = None

    @property
    def cfg(self) -> Any:
        return self.build.cfg

    @property
    def drops(self) -> Drops:
        return self.build.drops if self.own_drops is None else self.own_drops

    def ran_code_under(self, mode: str) -> None:
        """This recipe's code ran in the sandbox under isolation `mode` (the build record's
        sandbox_isolation; the card warns when it is none)."""
        (self.build.isolation if self.own_isolation is None else self.own_isolation)[self.spec.name] = mode

    def rows(self, name: str) -> list:
        if name not in self.spec.sources:
            raise BuildError(f"the {self.spec.name} recipe reads source {name!r}, which its SubsetSpec does not "
                             f"declare (sources={self.spec.sources}); add it there (automon/subsets.py)")
        return self.build.rows(name)


def recipe_items(ctx: BuildContext, spec: SubsetSpec, own_drops: Drops | None = None,
                 own_isolation: dict | None = None) -> list[Item]:
    """The items of one subset's recipe (then, for generator=policy, of its policy step)."""
    rctx = RecipeContext(ctx, spec, own_drops, own_isolation)
    items = spec.load_recipe()(rctx)
    stray = sorted({it.subset for it in items} - {spec.name})
    if stray:
        raise BuildError(f"the {spec.name} recipe returned items of subset(s) {stray}; an Item's subset must "
                         f"be the spec's name")
    if ctx.policy is not None and spec.name in ctx.cfg.policy.subsets:
        # generator=policy: the template items' test pairs are rewritten by the policy model, through
        # the subset's policy recipe (check_config refused a policy subset without one).
        report = ctx.policy_report.setdefault(spec.name, {})
        items = ctx.timed(f"policy:{spec.name}", spec.load_policy_recipe(), rctx, items, ctx.policy, report)
    return items


def run_recipes(ctx: BuildContext, chosen: list[SubsetSpec],
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
                results[spec.name] = ctx.timed(f"recipe:{spec.name}", recipe_items, ctx, spec)
                log.info("%s: %d items", spec.name, len(results[spec.name]))
        if while_waiting is not None and forks and not all(f.done() for f in forks.values()):
            _at_lowest_priority(while_waiting, dict(results), lambda: all(f.done() for f in forks.values()))
        for name, fork in forks.items():
            (results[name], drops, isolation), ctx.timings[f"recipe:{name}"] = fork.result()
            ctx.drops.update(drops)
            ctx.isolation.update(isolation)
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


def warm_minhash(items: dict[str, list[Item]], d, memo: dict, finished: Callable[[], bool],
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


def _recipe_in_child(ctx: BuildContext, spec: SubsetSpec) -> tuple[list[Item], Drops, dict]:
    drops, isolation = Drops(), {}
    return recipe_items(ctx, spec, drops, isolation), drops, isolation
