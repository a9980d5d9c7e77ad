"""Predictions -> metrics: each monitor's prediction rows (predictions.jsonl) and its metrics.json
document (automon.group_metrics.compute_metrics plus what the numbers were computed from)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any, MutableMapping, Sequence

from automon.config.eval import HoldoutConfig
from automon.evaluation.caveats import caveats
from automon.evaluation.completeness import request_summary
from automon.evaluation.identity import model_label
from automon.evaluation.inputs import Inputs
from automon.evaluation.rows import prediction_row
from automon.evaluation.scoring import Scored
from automon.evidence import EVIDENCE_VERSION
from automon.group_metrics import compute_metrics
from automon.metrics import METRICS_VERSION
from automon.release import release_line
from automon.monitors import FusedMonitor, Monitor
from automon.ood.reference import fusion_gains, thresholds
from automon.prompts import FIT_VERSION, get_template
from automon.schema import CATEGORIES, SUBSETS, TASKS
from automon.versions import code_version, library_versions

log = logging.getLogger("automon.evaluation")


def group_order() -> dict[str, list[str]]:
    """Report order of the metric groups (asked at run time: a subset may be registered after import)."""
    return {"subset": list(SUBSETS), "category": list(CATEGORIES), "task": list(TASKS)}


def reference_thresholds(m: Monitor, inputs: Inputs, scored: Scored) -> dict[str, float]:
    """far_key -> the monitor's score threshold at that FAR on its in-distribution benign samples."""
    if isinstance(m, FusedMonitor):
        return m.thresholds
    cal = inputs.reference[m.in_distribution][1]
    items = inputs.calibration(m)
    got = dict(zip((it.sample.id for it in items), scored.of(m, items)))
    return thresholds([got[s.id].p_yes if s.id in got else None for s in cal if s.label == 0])


def metrics_documents(c: HoldoutConfig, monitors: Sequence[Monitor], inputs: Inputs, scored: Scored,
                      tm: MutableMapping[str, float]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """(monitor name -> prediction rows, monitor name -> metrics.json document)."""
    t0 = time.perf_counter()
    rows = {m.name: [prediction_row(it, m, p) for it, p in zip(inputs.items, scored.of(m, inputs.items))]
            for m in monitors}
    ref_thr = {m.name: reference_thresholds(m, inputs, scored) for m in monitors} if inputs.reference else {}
    for f in monitors:
        if isinstance(f, FusedMonitor):
            j = f.judge
            f.info["gain_over_judge"] = fusion_gains(rows[j.name], rows[f.name], ref_thr[j.name], f.thresholds,  # type: ignore[union-attr]
                                                     list(c.data.subsets), j.in_distribution, c.bootstrap)  # type: ignore[union-attr]
            log.info("%s: lambda=%s (%s on %s)", f.name, f.info["lambda"], c.fusion, f.in_distribution)
    docs = {}
    for m in monitors:
        met = compute_metrics(rows[m.name], policy=c.unparseable, far_targets=c.far_targets, n_boot=c.bootstrap.n,
                              seed=c.bootstrap.seed, ci=c.bootstrap.ci, group_order=group_order(),
                              thresholds=ref_thr.get(m.name), evidence=m.gives_quotes)
        doc = {**header(c, inputs, m, scored), "requests": request_summary(rows[m.name], c.max_failed_share), **met}
        if inputs.not_scored:  # only then: a complete sweep's metrics.json is unchanged
            doc["not_scored"] = inputs.not_scored
        if m.name in ref_thr:
            doc["far_reference"] = {"thresholds": ref_thr[m.name], "in_distribution": m.in_distribution,
                                    "n_benign": sum(1 for s in inputs.reference[m.in_distribution][1] if s.label == 0)}
        if isinstance(m, FusedMonitor):
            doc["fusion"] = m.info
        docs[m.name] = doc
    tm["metrics_s"] += time.perf_counter() - t0
    return rows, docs


def header(c: HoldoutConfig, inputs: Inputs, m: Monitor, scored: Scored) -> dict[str, Any]:
    """What a monitor's metrics were computed from: config, data, monitor, cache, versions."""
    who = "base model" if m.artifact_dir is None else f"{'probe' if m.monitor_kind == 'probe' else 'adapter'} {m.name}"
    cache = scored.caches[m.name]
    return {
        "title": f"Held-out evaluation: {model_label(c)} + {who}, {c.prompt.name}, {c.shots} shot(s)",
        "metrics_version": METRICS_VERSION,
        "prompt": c.prompt.name, "prompt_kind": get_template(c.prompt.name).kind, "prompt_fit": FIT_VERSION,
        # only for a monitor that quotes: a document without it has no evidence figures (or predates them)
        **({"evidence_version": EVIDENCE_VERSION} if m.gives_quotes else {}),
        "backend": c.backend.name,
        "model": asdict(c.model),
        "monitor": m.describe(),
        "shots": c.shots, "shots_seed": c.shots_seed, "shot_ids": [s.id for s in inputs.shots],
        "threshold": c.threshold, "unparseable_policy": c.unparseable,
        "far_targets": list(c.far_targets), "bootstrap": asdict(c.bootstrap),
        "data": {"dir": str(c.data.dir), "manifest_hash": inputs.build.manifest_hash,
                 "release": release_line(inputs.build.manifest, inputs.build.manifest_hash), "subsets": list(c.data.subsets),
                 "max_pairs_per_subset": c.data.max_pairs_per_subset, "n_test": len(inputs.test)},
        # adapters of another (or an unknown) training build first: CONTAMINATED opens the report
        "caveats": [*inputs.notes, *caveats(c.model, inputs.build.manifest, inputs.test, c.data.max_pairs_per_subset)],
        "n_shortened": sum(1 for r in inputs.items if r.shortened), "max_seq_length": c.backend.max_seq_length,
        # every setting of the backend (an API key is never a setting: only its variable's name is)
        "backend_config": asdict(c.backend),
        # where the answers came from when no model was asked (backend=inspect_log: the log, its sha256, model)
        **({"source": src} if (src := c.backend.source_identity()) is not None else {}),
        "cache": {"dir": str(cache.root), "key": cache.key, "file": cache.path.name},
        "code_version": code_version(), "library_versions": library_versions(),
    }
