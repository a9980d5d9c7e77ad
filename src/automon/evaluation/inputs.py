"""What an evaluation scores, prepared once for every monitor: the build's test samples, few-shot
examples from its TRAINING split, every prompt rendered by the shared renderer, and, for
far_reference and fusion, each monitor's in-distribution reference samples (automon.ood.reference)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, MutableMapping, Sequence

from automon.config.eval import HoldoutConfig
from automon.data.io import Build, ensure_writable_dir, load_build
from automon.probes.features import check_layer, default_cache_root
from automon.evaluation.errors import EvalError
from automon.evaluation.fewshot import select_shots
from automon.evaluation.identity import output_dir
from automon.evaluation.monitors import sweep_runs, training_build_notes
from automon.evaluation.publish import refuse_foreign_output
from automon.evaluation.requests import render_all
from automon.evaluation.robustness import stressed_sets
from automon.models.loading import shared_tokenizer
from automon.monitors import Monitor, Rendered
from automon.ood.reference import reference_split
from automon.schema import Sample

log = logging.getLogger("automon.evaluation")


@dataclass
class Inputs:
    build: Build
    test: list[Sample]                       # the test samples scored, in build order
    shots: list[Sample]                      # few-shot examples (training split), the same before every prompt
    items: list[Rendered]                    # the test samples' prompts, in `test` order
    out_dir: Path
    cache_root: Path
    notes: list[str]                         # CONTAMINATED lines: adapters of another build (report opening)
    not_scored: list[str]                    # training runs of sweep_dir without an adapter
    tokenizer: Any = None                    # the model's tokenizer when the backend renders locally
    # in-distribution subset -> (fit, calib) samples; calibration prompts by sample id
    reference: dict[str, tuple[list[Sample], list[Sample]]] = field(default_factory=dict)
    reference_items: dict[str, Rendered] = field(default_factory=dict)
    # stress name -> the stressed copy of the test pairs it covers, rendered (automon.evaluation.robustness)
    stressed: dict[str, list[Rendered]] = field(default_factory=dict)

    def stressed_items(self) -> list[Rendered]:
        """Every stressed prompt, stress by stress (none without stress=)."""
        return [it for items in self.stressed.values() for it in items]

    def calibration(self, m: Monitor) -> list[Rendered]:
        """The calibration prompts monitor `m` scores besides the test split (none without a reference)."""
        if not self.reference:
            return []
        return [self.reference_items[s.id] for s in self.reference[m.in_distribution][1]
                if s.id in self.reference_items]


def pick_test_samples(samples: Sequence[Sample], subsets: Sequence[str], max_pairs: int | None) -> list[Sample]:
    """The test samples of `subsets`; with `max_pairs`, the first whole pairs (by pair id) of each subset,
    each with its contrast controls (a control has a pair id of its own, so it is picked by its pair's)."""
    keep = [s for s in samples if s.subset in subsets]
    if max_pairs is not None:
        def pair_of(s: Sample) -> str:
            return s.meta.get("group") or s.pair_id or s.id

        allowed: set[tuple[str, str]] = set()
        by_subset: dict[str, set[str]] = defaultdict(set)
        for s in keep:
            by_subset[s.subset].add(pair_of(s))
        for sub, pids in by_subset.items():
            allowed |= {(sub, p) for p in sorted(pids)[:max_pairs]}
        keep = [s for s in keep if (s.subset, pair_of(s)) in allowed]
    if not keep:
        raise EvalError(f"the test split has no samples in subsets {list(subsets)}")
    return keep


def refuse_build_dir(out_dir: Path, build_dir: Path) -> None:
    """output_dir must not be the data build or lie inside it (outputs would mix with the build's files)."""
    out, b = out_dir.resolve(), build_dir.resolve()
    if out == b or b in out.parents:
        raise EvalError(f"output_dir={out_dir} is {'the data build' if out == b else 'inside the data build'} "
                        f"{build_dir}", "output_dir", "choose an output_dir= outside the data build (or leave it "
                        "unset: evals/<model>__<monitor>__<prompt>__shots<k>)")


def prepare_inputs(c: HoldoutConfig, monitors: Sequence[Monitor], tm: MutableMapping[str, float]) -> Inputs:
    """Load and render everything the monitors will score; `tm` collects the seconds spent."""
    t0 = time.perf_counter()
    build = load_build(c.data.dir)
    notes = training_build_notes(list(monitors), build.manifest_hash, c.data.dir, c.allow_other_build)
    test = pick_test_samples(build.samples("test"), c.data.subsets, c.data.max_pairs_per_subset)
    tm["data_s"] += time.perf_counter() - t0
    out_dir = output_dir(c, monitors)
    refuse_foreign_output(out_dir, Path(build.path))  # the build, a training run, a folder of other files
    ensure_writable_dir(out_dir, "output_dir")  # before the model loads; created when results come
    if c.detectors:  # the detectors' settings that failed only once the model had loaded
        check_layer(c.model, c.ood.layer, "ood.layer")
        ensure_writable_dir(c.ood.cache_dir or default_cache_root(), "ood.cache_dir" if c.ood.cache_dir else "AUTOMON_CACHE")
    not_scored = sweep_runs(Path(c.sweep_dir))[1] if c.sweep_dir and not c.backend.defines_monitors else []
    for line in not_scored:
        log.warning("sweep_dir %s: not scored: %s", c.sweep_dir, line)
    tokenizer = None
    if c.backend.local_model:
        t0 = time.perf_counter()
        tokenizer = shared_tokenizer(c.model)  # once per process: several evaluations in one reuse it
        tm["load_s"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    shots = select_shots(build.samples("train"), c.shots, c.shots_seed, c.shots_max_chars, test) if c.shots else []
    tm["data_s"] += time.perf_counter() - t0

    def render(samples: Sequence[Sample]) -> list[Rendered]:
        return render_all(samples, prompt=c.prompt.name, shots=shots, tokenizer=tokenizer,
                          enable_thinking=c.model.enable_thinking, max_seq_length=c.backend.max_seq_length)

    t0 = time.perf_counter()
    inputs = Inputs(build, test, shots, render(test), out_dir,
                    Path(c.cache_dir) if c.cache_dir else out_dir / "cache", notes, not_scored, tokenizer)
    # rendered like the clean samples (same shots, same fit): only the stress's own change differs
    inputs.stressed = {name: render(samples) for name, samples in stressed_sets(c, test).items()}
    n_short = sum(1 for r in inputs.items if r.shortened)
    if n_short:
        log.info("%d prompts shortened in the middle to fit backend.max_seq_length=%s",
                 n_short, c.backend.max_seq_length)
    if c.far_reference or c.fusion:
        # each monitor also scores in-distribution calibration samples of its training split
        train = build.samples("train")
        for m in monitors:
            if m.in_distribution not in inputs.reference:
                inputs.reference[m.in_distribution] = reference_split(train, m.in_distribution, c.ood.cap, c.ood.seed)
        # without fusion only the benign ones are needed (the FAR thresholds)
        ref = {s.id: s for _, cal in inputs.reference.values() for s in cal if c.fusion or s.label == 0}
        ref_samples = sorted(ref.values(), key=lambda s: s.id)
        inputs.reference_items = {r.sample.id: r for r in render(ref_samples)}
    tm["render_s"] += time.perf_counter() - t0
    return inputs
