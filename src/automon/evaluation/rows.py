"""One line of predictions.jsonl, made from a monitor's prediction on one rendered sample: the clean
rows (evaluation/documents.py) and the stressed ones (evaluation/robustness.py) are made alike."""

from __future__ import annotations

from typing import Any

from automon.controls import control_kind
from automon.monitors import Monitor, Prediction, Rendered


def prediction_row(it: Rendered, m: Monitor, p: Prediction) -> dict[str, Any]:
    """One line of predictions.jsonl. Its `p_yes` column is the score thresholds and AUROC read
    (Prediction.score: a fused monitor's fused score)."""
    s = it.sample
    row = {"id": s.id, "pair_id": s.pair_id, "subset": s.subset, "category": s.category, "task": s.task,
           "label": s.label, "p_yes": p.score, "pred": m.flag(p), "raw": p.text, "mass": p.mass,
           "error": p.error, "shortened": it.shortened}
    kind = control_kind(s.meta)
    if kind is not None:  # a contrast control (wordings v9): metrics report it apart, grouped with its pair
        row.update(control=kind, group=s.meta.get("group"))
    return row
