"""One line of predictions.jsonl, made from a monitor's prediction on one rendered sample: the clean
rows (evaluation/documents.py) and the stressed ones (evaluation/robustness.py) are made alike."""

from __future__ import annotations

from typing import Any

from automon.controls import control_kind
from automon.evidence import on_gold
from automon.monitors import Monitor, Prediction, Rendered


def prediction_row(it: Rendered, m: Monitor, p: Prediction) -> dict[str, Any]:
    """One line of predictions.jsonl. Its `p_yes` column is the score thresholds and AUROC read
    (Prediction.score: a fused monitor's fused score). A monitor that quotes adds `quotes` (its answer's,
    null where none could be read) and `on_gold` (one bool per quote: on a gold span of the sample,
    automon.evidence; null where the sample has no gold evidence)."""
    s = it.sample
    row = {"id": s.id, "pair_id": s.pair_id, "subset": s.subset, "category": s.category, "task": s.task,
           "label": s.label, "p_yes": p.score, "pred": m.flag(p), "raw": p.text, "mass": p.mass,
           "error": p.error, "shortened": it.shortened}
    if m.gives_quotes:
        quotes = m.quotes(p)
        row.update(quotes=quotes, on_gold=on_gold(quotes or [], s.evidence, s.response) if s.evidence else None)
    kind = control_kind(s.meta)
    if kind is not None:  # a contrast control (wordings v9): metrics report it apart, grouped with its pair
        row.update(control=kind, group=s.meta.get("group"))
    return row
