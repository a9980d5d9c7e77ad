"""Held-out evaluation (what eval/holdout.py runs): score monitors, write predictions, metrics, report.

    resolve monitors  (evaluation/monitors.py: base, adapters, a sweep, probes; + fused wrappers: fusion.py)
    -> inputs         (evaluation/inputs.py: test split, shots from the TRAINING split, rendered prompts)
    -> score          (evaluation/scoring.py: through the prediction cache; only what is missing)
    -> metrics        (evaluation/documents.py: prediction rows and metrics.json documents)
    -> robustness     (evaluation/robustness.py: stress=: the stressed sets' rows, clean vs stressed)
    -> publish        (evaluation/results.py: predictions.jsonl, metrics.json, report.md, figures, matrix)
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from automon.backends import make_judge
from automon.config.eval import HoldoutConfig
from automon.evaluation.documents import metrics_documents
from automon.evaluation.fusion import print_cost, with_fusion
from automon.evaluation.identity import as_config
from automon.evaluation.inputs import prepare_inputs
from automon.evaluation.monitors import resolve_monitors
from automon.evaluation.results import publish_results
from automon.evaluation.robustness import with_robustness
from automon.evaluation.scoring import score_monitors
from automon.monitors import Monitor
from automon.report.columns import columns, quotes_in

log = logging.getLogger("automon.evaluation")


@dataclass
class EvalResult:
    output_dir: Path
    monitors: list[Monitor]
    metrics: dict[str, dict]                 # monitor name -> metrics.json document
    predictions: dict[str, list[dict]]       # monitor name -> prediction rows (stress=: then the stressed ones)
    timings: dict[str, float] = field(default_factory=dict)
    n_computed: int = 0
    n_cached: int = 0


def evaluate(c: HoldoutConfig, judge_factory: Callable[..., Any] = make_judge) -> EvalResult:
    """One evaluation (one monitor or many). `judge_factory(cfg, prompt kind, adapters, tokenizer)`
    builds the scoring backend: make_judge unless a test substitutes a wrapper."""
    t_start, tm = time.perf_counter(), defaultdict(float)
    monitors = resolve_monitors(c)
    for m in monitors:
        if m.mismatches:
            log.warning("evaluating %s despite: %s (allow_mismatch=true)", m.name, "; ".join(m.mismatches))
    inputs = prepare_inputs(c, monitors, tm)
    monitors = with_fusion(c, monitors, inputs)
    scored = score_monitors(c, monitors, inputs, tm, judge_factory)
    if c.fusion:
        print_cost(tm)
    rows, docs = metrics_documents(c, monitors, inputs, scored, tm)
    rows, docs = with_robustness(c, monitors, inputs.stressed, scored.of, rows, docs, tm)
    publish_results(c, monitors, inputs, rows, docs, tm, t_start)
    return EvalResult(output_dir=inputs.out_dir, monitors=monitors, metrics=docs, predictions=rows,
                      timings=dict(tm), n_computed=scored.n_computed, n_cached=scored.n_cached)


def run(cfg: Any) -> EvalResult:
    """Entry point of eval/holdout.py: evaluate, then one console line per monitor."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    res = evaluate(as_config(cfg))
    for m in res.monitors:
        o = res.metrics[m.name]["overall"]
        print(f"{m.row:>16s}  " + "  ".join(f"{col.header} {' '.join(col.cells(o, []))}"
                                              for col in columns(brief=True, evidence=quotes_in([o]))))
    print(f"wrote {res.output_dir} ({res.n_computed} predictions computed, {res.n_cached} from cache)")
    return res
