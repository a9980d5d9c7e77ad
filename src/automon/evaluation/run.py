"""Held-out evaluation (what eval/holdout.py runs): score monitors, write predictions, metrics, report.

Flow: resolve monitors (and refuse adapters trained differently) -> load the build's test split ->
pick few-shot examples from the TRAINING split -> render every prompt once with the shared renderer
-> look every (monitor, sample) up in the prediction cache -> score only what is missing, in chunks,
flushing the cache after each -> predictions.jsonl, metrics.json, report.md, figures (+ matrix for a
sweep) -> optional wandb mirror.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from omegaconf import OmegaConf

from automon.data.io import ensure_writable_dir, load_build
from automon.config.eval import HoldoutConfig
from automon.evaluation.cache import PredictionCache
from automon.errors import disk_full
from automon.evaluation.caveats import caveats
from automon.evaluation.completeness import (earlier_failures, incomplete_fix, mark_unparseable,  # noqa: F401
                                             request_summary, worst)
from automon.evaluation.errors import EvalError, IncompleteEvaluation
from automon.evaluation.fewshot import select_shots
from automon.evaluation.identity import as_config, identity, model_label, output_dir, record
from automon.evaluation.monitors import Monitor, resolve_monitors, sweep_runs, training_build_notes
from automon.evaluation.requests import Rendered, render_all
from automon.backends import JudgeRequest, JudgeResult, make_judge
from automon.metrics import METRICS_VERSION, compute_metrics
from automon.prompts import FIT_VERSION, get_template, parse_answer
from automon.report.columns import columns
from automon.schema import CATEGORIES, SUBSETS, TASKS, Sample
from automon.versions import code_version, library_versions

log = logging.getLogger("automon.evaluation")


def group_order() -> dict[str, list[str]]:
    """Report order of the metric groups (asked at run time: a subset may be registered after import)."""
    return {"subset": list(SUBSETS), "category": list(CATEGORIES), "task": list(TASKS)}


@dataclass
class EvalResult:
    output_dir: Path
    monitors: list[Monitor]
    metrics: dict[str, dict]                 # monitor name -> metrics.json document
    predictions: dict[str, list[dict]]       # monitor name -> prediction rows
    timings: dict[str, float] = field(default_factory=dict)
    n_computed: int = 0
    n_cached: int = 0


def run(cfg: Any) -> EvalResult:
    """Entry point of eval/holdout.py."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    res = evaluate(as_config(cfg))
    for m in res.monitors:
        o = res.metrics[m.name]["overall"]
        print(f"{m.label:>16s}  " + "  ".join(f"{col.label} {' '.join(col.cells(o, []))}"
                                              for col in columns(brief=True)))
    print(f"wrote {res.output_dir} ({res.n_computed} predictions computed, {res.n_cached} from cache)")
    return res


# ---------------------------------------------------------------- keys

def cache_key(c: HoldoutConfig, m: Monitor, kind: str) -> dict[str, Any]:
    """Everything besides the prompt itself that changes a prediction: what the backend says
    identifies its model and settings, plus the adapter, prompt and shots (the same for every backend)."""
    return {
        "backend": c.backend.name,
        **c.backend.cache_identity(c.model, kind, m.name if m.adapter_dir else None),
        "adapter": m.adapter_hash, "prompt": c.prompt.name,
        "shots": c.shots, "shots_seed": c.shots_seed if c.shots else None,
        "enable_thinking": c.model.enable_thinking,
    }


@lru_cache(maxsize=4)
def _tokenizer(pretrained: str, revision: str | None) -> Any:
    """The model's tokenizer, loaded once per process (several evaluations in one process reuse it)."""
    from types import SimpleNamespace

    from automon.models.loading import load_tokenizer

    return load_tokenizer(SimpleNamespace(pretrained=pretrained, revision=revision))


# ---------------------------------------------------------------- data

def select_test(samples: Sequence[Sample], subsets: Sequence[str], max_pairs: int | None) -> list[Sample]:
    keep = [s for s in samples if s.subset in subsets]
    if max_pairs is not None:
        allowed: set[tuple[str, str]] = set()
        by_subset: dict[str, set[str]] = defaultdict(set)
        for s in keep:
            by_subset[s.subset].add(s.pair_id or s.id)
        for sub, pids in by_subset.items():
            allowed |= {(sub, p) for p in sorted(pids)[:max_pairs]}
        keep = [s for s in keep if (s.subset, s.pair_id or s.id) in allowed]
    if not keep:
        raise EvalError(f"the test split has no samples in subsets {list(subsets)}")
    return keep


def prediction_row(r: Rendered, res: JudgeResult, kind: str, prompt: str, threshold: float) -> dict[str, Any]:
    s = r.sample
    if res.error is not None:
        pred = None
    elif kind == "direct" and res.p_yes is not None:
        pred = int(res.p_yes >= threshold)
    else:  # evidence, or a direct answer without logprobs (some API servers)
        pred = parse_answer(res.text or "", prompt).pred
    return {"id": s.id, "pair_id": s.pair_id, "subset": s.subset, "category": s.category, "task": s.task,
            "label": s.label, "p_yes": res.p_yes, "pred": pred, "raw": res.text, "mass": res.mass,
            "error": res.error, "shortened": r.shortened}


# ---------------------------------------------------------------- the evaluation

def evaluate(c: HoldoutConfig, judge_factory: Callable[..., Any] = make_judge) -> EvalResult:
    """Run one evaluation (one monitor or a sweep). `judge_factory(cfg, kind, adapters, tokenizer)`
    is make_judge unless a test substitutes a wrapper."""
    t_start = time.perf_counter()
    tm: dict[str, float] = defaultdict(float)
    kind = get_template(c.prompt.name).kind
    monitors = resolve_monitors(c)
    for m in monitors:
        if m.mismatches:
            log.warning("evaluating %s despite: %s (allow_mismatch=true)", m.name, "; ".join(m.mismatches))
    t0 = time.perf_counter()
    build = load_build(c.data.dir)
    notes = training_build_notes(monitors, build.manifest_hash, c.data.dir, c.allow_other_build)
    test = select_test(build.samples("test"), c.data.subsets, c.data.max_pairs_per_subset)
    tm["data_s"] += time.perf_counter() - t0
    out_dir = output_dir(c, monitors)
    refuse_build_dir(out_dir, Path(build.path))
    ensure_writable_dir(out_dir, "output_dir")  # before the model loads; created when results come
    not_scored = sweep_runs(Path(c.sweep_dir))[1] if c.sweep_dir and c.backend.monitors(c) is None else []
    for line in not_scored:
        log.warning("sweep_dir %s: not scored: %s", c.sweep_dir, line)
    cache_root = Path(c.cache_dir) if c.cache_dir else out_dir / "cache"

    tokenizer = None
    if c.backend.local_model:
        t0 = time.perf_counter()
        tokenizer = _tokenizer(c.model.pretrained, c.model.revision)
        tm["load_s"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    shots = select_shots(build.samples("train"), c.shots, c.shots_seed, c.shots_max_chars, test) if c.shots else []
    tm["data_s"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    rendered = render_all(test, prompt=c.prompt.name, shots=shots, tokenizer=tokenizer,
                          enable_thinking=c.model.enable_thinking, max_seq_length=c.backend.max_seq_length)
    tm["render_s"] += time.perf_counter() - t0
    n_short = sum(1 for r in rendered if r.shortened)
    if n_short:
        log.info("%d prompts shortened in the middle to fit backend.max_seq_length=%s",
                 n_short, c.backend.max_seq_length)

    # ---- reference samples (far_reference / fusion): each monitor also scores in-distribution calibration
    # samples of its training split (automon.ood.evaluate), appended after the test samples
    n_test = len(rendered)
    wanted: dict[str, list[int]] = {m.name: list(range(n_test)) for m in monitors}
    splits: dict[str, tuple[list[Sample], list[Sample]]] = {}
    if c.far_reference or c.fusion:
        from automon.ood.evaluate import reference_split, training_subset

        t0 = time.perf_counter()
        train = build.samples("train")
        for m in monitors:
            sub = training_subset(m)
            if sub not in splits:
                splits[sub] = reference_split(train, sub, c.ood.cap, c.ood.seed)
        # without fusion only the benign ones are needed (the FAR thresholds)
        ref = {s.id: s for _, cal in splits.values() for s in cal if c.fusion or s.label == 0}
        ref_samples = sorted(ref.values(), key=lambda s: s.id)
        rendered = rendered + render_all(ref_samples, prompt=c.prompt.name, shots=shots, tokenizer=tokenizer,
                                         enable_thinking=c.model.enable_thinking,
                                         max_seq_length=c.backend.max_seq_length)
        pos = {s.id: n_test + k for k, s in enumerate(ref_samples)}
        for m in monitors:
            wanted[m.name] += [pos[s.id] for s in splits[training_subset(m)][1] if s.id in pos]
        tm["render_s"] += time.perf_counter() - t0

    # ---- cache lookup
    caches = {m.name: PredictionCache(cache_root, cache_key(c, m, kind)) for m in monitors}
    results: dict[str, list[JudgeResult | None]] = {m.name: [None] * len(rendered) for m in monitors}
    todo: list[tuple[Monitor, int]] = []
    for m in monitors:
        cache = caches[m.name]
        for i in wanted[m.name]:
            r = rendered[i]
            hit = cache.get(r.sample.id, r.prompt_sha)
            if hit is None:
                todo.append((m, i))
            else:
                results[m.name][i] = hit
    total = sum(len(v) for v in wanted.values())
    n_cached = total - len(todo)
    if n_cached:
        log.info("%d of %d predictions come from the cache in %s", n_cached, total, cache_root)

    # ---- scoring what is missing
    timing = None
    if todo:
        adapters = []
        for m in monitors:
            if m.adapter_dir is not None and any(t[0] is m for t in todo):
                adapters.append(m.lora)
        t0 = time.perf_counter()
        judge = judge_factory(c, kind, adapters, tokenizer)
        tm["load_s"] += time.perf_counter() - t0
        timing = judge.timing
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=n_cached, unit="sample", desc=f"{c.backend.name} {c.prompt.name}",
                   disable=not c.progress, dynamic_ncols=True, smoothing=0.1)
        t_loop = time.perf_counter()
        try:
            for start in range(0, len(todo), c.backend.chunk_size):
                chunk = todo[start:start + c.backend.chunk_size]
                reqs = [JudgeRequest(id=rendered[i].sample.id, messages=rendered[i].messages,
                                     prompt=rendered[i].prompt, adapter=m.name if m.adapter_dir else None)
                        for m, i in chunk]
                out = judge.score(reqs)
                if c.backend.unparseable_fails:
                    out = [mark_unparseable(res, kind, c.prompt.name) for res in out]
                per_monitor: dict[str, list] = defaultdict(list)
                for (m, i), res in zip(chunk, out):
                    results[m.name][i] = res
                    per_monitor[m.name].append((rendered[i].sample.id, rendered[i].prompt_sha, res))
                for name, items in per_monitor.items():
                    caches[name].put_many(items)
                bar.update(len(chunk))
        except OSError as e:
            if not disk_full(e):
                raise
            raise EvalError(f"cannot write the prediction cache: {e.strerror}", e.filename or str(cache_root),
                            "free some space (or quota) there, or set cache_dir= elsewhere, and rerun the same "
                            "command: the predictions cached so far are kept") from e
        finally:
            bar.close()
            tm["score_loop_s"] += time.perf_counter() - t_loop
            judge.close()
        tm["model_s"] = timing.model_s
        tm["tokenize_s"] = timing.tokenize_s
        tm["prompt_tokens"] = timing.prompt_tokens

    # ---- predictions, metrics, reports
    t0 = time.perf_counter()
    preds: dict[str, list[dict]] = {}
    docs: dict[str, dict] = {}
    ref_thr: dict[str, dict[str, float]] = {}
    calib_p: dict[str, list] = {}
    for m in monitors:
        rows = [prediction_row(r, res, kind, c.prompt.name, c.threshold)  # type: ignore[arg-type]
                for r, res in zip(rendered[:n_test], results[m.name][:n_test])]
        preds[m.name] = rows
        if splits:
            from automon.ood.evaluate import thresholds, training_subset

            cal = splits[training_subset(m)][1]
            got = {rendered[i].sample.id: results[m.name][i] for i in wanted[m.name][n_test:]}
            calib_p[m.name] = [got[s.id].p_yes if s.id in got and got[s.id] else None for s in cal]
            ref_thr[m.name] = thresholds([p for p, s in zip(calib_p[m.name], cal) if s.label == 0])
    monitors = list(monitors)
    fused_info: dict[str, dict] = {}
    if c.fusion:
        from automon.ood.evaluate import run_fusion

        tm["metrics_s"] += time.perf_counter() - t0
        fused, tm["detectors_s"] = run_fusion(c, monitors, test, splits, preds, calib_p, ref_thr)
        t0 = time.perf_counter()
        for f in fused:
            monitors.append(f.monitor)
            preds[f.monitor.name] = f.rows
            ref_thr[f.monitor.name] = f.thresholds
            caches[f.monitor.name] = caches[f.judge]
            fused_info[f.monitor.name] = f.info
        _print_cost(tm)
    for m in monitors:
        rows = preds[m.name]
        met = compute_metrics(rows, policy=c.unparseable, far_targets=c.far_targets, n_boot=c.bootstrap.n,
                              seed=c.bootstrap.seed, ci=c.bootstrap.ci, group_order=group_order(),
                              thresholds=ref_thr.get(m.name))
        docs[m.name] = {**_doc_header(c, kind, build, test, shots, n_short, m, caches[m.name], notes),
                        "requests": request_summary(rows, c.max_failed_share), **met}
        if not_scored:  # only then: a complete sweep's metrics.json is unchanged
            docs[m.name]["not_scored"] = not_scored
        if m.name in ref_thr:
            docs[m.name]["far_reference"] = {"thresholds": ref_thr[m.name], "in_distribution": training_subset(m),
                                             "n_benign": sum(1 for s in splits[training_subset(m)][1] if s.label == 0)}
        if m.name in fused_info:
            docs[m.name]["fusion"] = fused_info[m.name]
    tm["metrics_s"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    from automon.evaluation.outputs import write_outputs
    from automon.evaluation.publish import staged_outputs

    summary = request_summary([r for rows in preds.values() for r in rows], c.max_failed_share)
    # Per monitor: one adapter the server does not know fails all its requests, however many others a
    # sweep has.
    summary["complete"] = all(d["requests"]["complete"] for d in docs.values())
    earlier = earlier_failures(out_dir, build.manifest_hash, len(test), c)
    kept = earlier is not None and earlier < summary["failed"]
    if kept:
        log.warning("kept the earlier results in %s (%d failed requests) over this run's (%d failed)",
                    out_dir, earlier, summary["failed"])
        tm["report_s"] += time.perf_counter() - t0
        _finish_timing(tm, t_start)
        (out_dir / "timing.json").write_text(json.dumps(dict(tm), indent=2) + "\n")
    else:  # the whole set in a staging dir, then moved in: a failure leaves the earlier set whole
        with staged_outputs(out_dir) as stage:
            (stage / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(c)), encoding="utf-8")
            written = write_outputs(c, out_dir, monitors, preds, docs, kind, write_to=stage)
            tm["report_s"] += time.perf_counter() - t0
            _finish_timing(tm, t_start)
            (stage / "timing.json").write_text(json.dumps(dict(tm), indent=2) + "\n")
            if summary["complete"]:  # only complete outputs are current (pipeline.py skips them)
                record(stage, identity(c, monitors, build.manifest_hash), written)
    if not summary["complete"]:
        where = (f"{out_dir}: the earlier results there, with fewer failures, were kept" if kept
                 else f"{out_dir}/report.md, marked incomplete")
        raise IncompleteEvaluation(
            f"{summary['failed']} of {summary['n']} requests to backend={c.backend.name} failed; {worst(docs)} "
            f"is over max_failed_share={c.max_failed_share} (first error: {summary['first_error']})",
            where,
            incomplete_fix(summary["first_error"]))
    return EvalResult(output_dir=out_dir, monitors=monitors, metrics=docs, predictions=preds,
                      timings=dict(tm), n_computed=len(todo), n_cached=n_cached)


def _print_cost(tm: Mapping[str, float]) -> None:
    """The detectors' time against the time the monitors took to score (goal: under 50% extra)."""
    det, score = tm.get("detectors_s", 0.0), tm.get("score_loop_s", 0.0)
    share = f"{det / score:.0%} of" if score > 0 else "n/a (every prediction came from the cache) vs"
    print(f"OOD detectors + fusion: {det:.1f} s = {share} the monitors' scoring time ({score:.1f} s)")


def _finish_timing(tm: dict[str, float], t_start: float) -> None:
    tm["total_s"] = time.perf_counter() - t_start
    tm["harness_s"] = tm["total_s"] - tm.get("model_s", 0.0) - tm.get("load_s", 0.0)


def refuse_build_dir(out_dir: Path, build_dir: Path) -> None:
    """output_dir must not be the data build or lie inside it (outputs would mix with the build's files)."""
    out, b = out_dir.resolve(), build_dir.resolve()
    if out == b or b in out.parents:
        raise EvalError(f"output_dir={out_dir} is {'the data build' if out == b else 'inside the data build'} "
                        f"{build_dir}", "output_dir", "choose an output_dir= outside the data build (or leave it "
                        "unset: evals/<model>__<monitor>__<prompt>__shots<k>)")


def _doc_header(c: HoldoutConfig, kind: str, build: Any, test: Sequence[Sample], shots: Sequence[Sample],
                n_short: int, m: Monitor, cache: PredictionCache, notes: Sequence[str] = ()) -> dict[str, Any]:
    who = "base model" if m.adapter_dir is None else f"{'probe' if m.adapter_type == 'probe' else 'adapter'} {m.name}"
    doc: dict[str, Any] = {
        "title": f"Held-out evaluation: {model_label(c)} + {who}, {c.prompt.name}, {c.shots} shot(s)",
        "metrics_version": METRICS_VERSION,
        "prompt": c.prompt.name, "prompt_kind": kind, "prompt_fit": FIT_VERSION,
        "backend": c.backend.name,
        "model": asdict(c.model),
        "monitor": m.describe(),
        "shots": c.shots, "shots_seed": c.shots_seed, "shot_ids": [s.id for s in shots],
        "threshold": c.threshold, "unparseable_policy": c.unparseable,
        "far_targets": list(c.far_targets), "bootstrap": asdict(c.bootstrap),
        "data": {"dir": str(c.data.dir), "manifest_hash": build.manifest_hash, "subsets": list(c.data.subsets),
                 "max_pairs_per_subset": c.data.max_pairs_per_subset, "n_test": len(test)},
        # adapters of another (or an unknown) training build first: CONTAMINATED opens the report
        "caveats": [*notes, *caveats(c.model, build.manifest, test, c.data.max_pairs_per_subset)],
        "n_shortened": n_short, "max_seq_length": c.backend.max_seq_length,
        # every setting of the backend (an API key is never a setting: only its variable's name is)
        "backend_config": asdict(c.backend),
        "cache": {"dir": str(cache.root), "key": cache.key, "file": cache.path.name},
        "code_version": code_version(), "library_versions": library_versions(),
    }
    return doc
