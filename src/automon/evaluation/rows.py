"""One line of predictions.jsonl, made from a monitor's prediction on one rendered sample: the clean
rows (evaluation/documents.py), the stressed ones (evaluation/robustness.py) and the inspect_ai task's
scores (automon.inspect_task, from the fields its samples carry) are made alike."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from automon.controls import control_kind
from automon.evidence import on_gold
from automon.monitors import Monitor, Prediction, Rendered
from automon.schema import Sample


def sample_fields(s: Sample) -> dict[str, Any]:
    """What a prediction row keeps of its sample: who it is, its groups and label, and, for a contrast
    control (wordings v9), its kind and the pair it is grouped with (metrics report it apart)."""
    fields = {"id": s.id, "pair_id": s.pair_id, "subset": s.subset, "category": s.category, "task": s.task,
              "label": s.label}
    kind = control_kind(s.meta)
    if kind is not None:
        fields.update(control=kind, group=s.meta.get("group"))
    return fields


def row_of(fields: Mapping[str, Any], p: Prediction, pred: int | None, shortened: int) -> dict[str, Any]:
    """A row from `sample_fields`, the prediction and the monitor's decision on it. Its `p_yes` column is
    the score thresholds and AUROC read (Prediction.score: a fused monitor's fused score)."""
    row = {**{k: fields[k] for k in ("id", "pair_id", "subset", "category", "task", "label")},
           "p_yes": p.score, "pred": pred, "raw": p.text, "mass": p.mass, "error": p.error, "shortened": shortened}
    if fields.get("control") is not None:
        row.update(control=fields["control"], group=fields.get("group"))
    return row


def prediction_row(it: Rendered, m: Monitor, p: Prediction) -> dict[str, Any]:
    """One line of predictions.jsonl (row_of). A monitor that quotes adds `quotes` (its answer's, null where
    none could be read) and `on_gold` (one bool per quote: on a gold span of the sample, automon.evidence;
    null where the sample has no gold evidence)."""
    s = it.sample
    return {**row_of(sample_fields(s), p, m.flag(p), it.shortened), **quote_fields(m, p, s.evidence, s.response)}


def quote_fields(m: Monitor, p: Prediction, evidence: Sequence[str], response: str) -> dict[str, Any]:
    """A quoting monitor's `quotes` and `on_gold` for a row (nothing for a monitor that quotes nothing)."""
    if not m.gives_quotes:
        return {}
    quotes = m.quotes(p)
    return {"quotes": quotes, "on_gold": on_gold(quotes or [], evidence, response) if evidence else None}
