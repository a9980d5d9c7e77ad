"""One line of predictions.jsonl, made from a monitor's prediction on one rendered sample: the clean
rows (evaluation/documents.py) and the stressed ones (evaluation/robustness.py) are made alike."""

from __future__ import annotations

from typing import Any

from automon.monitors import Monitor, Prediction, Rendered


def prediction_row(it: Rendered, m: Monitor, p: Prediction) -> dict[str, Any]:
    """One line of predictions.jsonl. Its `p_yes` column is the score thresholds and AUROC read
    (Prediction.score: a fused monitor's fused score)."""
    s = it.sample
    return {"id": s.id, "pair_id": s.pair_id, "subset": s.subset, "category": s.category, "task": s.task,
            "label": s.label, "p_yes": p.score, "pred": m.flag(p), "raw": p.text, "mass": p.mass,
            "error": p.error, "shortened": it.shortened}
