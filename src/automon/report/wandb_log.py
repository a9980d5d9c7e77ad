"""Mirror an evaluation's files to Weights & Biases (optional; the files are the record)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from automon.metrics import to_jsonable
from automon.report.columns import far_keys, metric_names, metric_values, quotes_in
from automon.report.tables import groups_of, matrix_fields, robustness_rows

log = logging.getLogger(__name__)
Table = tuple[Sequence[str], Sequence[Sequence[Any]]]


def eval_tables(monitors: Sequence[Mapping[str, Any]], docs: Mapping[str, Mapping[str, Any]],
                matrix: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Table]:
    """The wandb tables of an evaluation: `metrics` (one row per monitor and group), for a sweep
    `matrix` (matrix.csv's rows), and with stress= `robustness` (robustness.csv's). `monitors` are
    Monitor.describe() dicts; `docs[name]` their metrics."""
    fk = far_keys(docs[monitors[0]["name"]]["overall"])
    ev = quotes_in(docs[m["name"]]["overall"] for m in monitors)
    rows = [[m["name"], m["label"], by, g, *metric_values(v, fk, evidence=ev)]
            for m in monitors for by, g, v in groups_of(docs[m["name"]])]
    out: dict[str, Table] = {"metrics": (["monitor", "row", "group_by", "group", *metric_names(fk, evidence=ev)],
                                         to_jsonable(rows))}
    if matrix:
        fields = matrix_fields(matrix)
        out["matrix"] = (fields, to_jsonable([[r[k] for k in fields] for r in matrix]))
    robust = robustness_rows(monitors, docs)  # stress=: robustness.csv's rows
    if robust:
        fields = matrix_fields(robust)
        out["robustness"] = (fields, to_jsonable([[r[k] for k in fields] for r in robust]))
    return out


def eval_summary(monitors: Sequence[Mapping[str, Any]], docs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """`<row label>/<column>` for each monitor's overall numbers in the brief columns (the evidence ones
    for a monitor that quotes)."""
    out: dict[str, Any] = {}
    for m in monitors:
        o = docs[m["name"]]["overall"]
        ev = quotes_in([o])
        out.update({f"{m['label']}/{k}": v for k, v in zip(metric_names([], brief=True, evidence=ev),
                                                            metric_values(o, [], brief=True, evidence=ev))})
    return to_jsonable(out)


def mirror(wandb_cfg: Any, out_dir: Path, name: str, config: Mapping[str, Any], summary: Mapping[str, Any],
           tables: Mapping[str, tuple[Sequence[str], Sequence[Sequence[Any]]]],
           images: Mapping[str, Path]) -> str | None:
    """Log tables, images and summary numbers; returns the wandb run directory (None if disabled)."""
    if wandb_cfg.mode == "disabled":
        return None
    import wandb

    wdir = Path(wandb_cfg.dir) if wandb_cfg.dir else out_dir
    wdir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=wandb_cfg.project, entity=wandb_cfg.entity, mode=wandb_cfg.mode, dir=str(wdir),
                     name=name, job_type="eval", config=dict(config))
    try:
        for key, (cols, rows) in tables.items():
            run.log({key: wandb.Table(columns=list(cols), data=[list(r) for r in rows])})
        for key, p in images.items():
            if Path(p).exists():
                run.log({key: wandb.Image(str(p))})
        run.summary.update(dict(summary))
        return str(getattr(run, "dir", "") or "")
    finally:
        run.finish()
