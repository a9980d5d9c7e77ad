"""Write an evaluation's files: predictions.jsonl, metrics.json, report.md, figures, matrix; mirror to wandb."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from automon.evaluation.completeness import request_summary, requests_complete
from automon.evaluation.monitors import Monitor
from automon.group_metrics import curve_for
from automon.metrics import to_jsonable
from automon.report import markdown, tables
from automon.schema import Sample

PRED_FIELDS = ("id", "pair_id", "subset", "category", "task", "label", "p_yes", "pred", "raw", "mass",
               "error", "shortened")
# Written where a row has them: a quoting monitor's quotes and whether each is on gold (evaluation/rows.py),
# then a stressed sample's stress. A row without them is written as before they existed.
OPTIONAL_FIELDS = ("quotes", "on_gold", "stress")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, obj: Any) -> None:
    _atomic_write(path, json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False) + "\n")


def write_predictions(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """One line per row; a stressed sample's row (after the clean ones) also names its `stress`."""
    _atomic_write(path, "".join(json.dumps(to_jsonable({**{k: r[k] for k in PRED_FIELDS},
                                                        **{k: r[k] for k in OPTIONAL_FIELDS if k in r}}),
                                           ensure_ascii=False) + "\n" for r in rows))


def clean_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The prediction rows of the clean test samples (not of a stressed copy)."""
    return [r for r in rows if "stress" not in r]


def write_robustness(out_dir: Path, monitors: Sequence[Monitor], docs: Mapping[str, dict],
                     stressed_samples: Sequence[Sample]) -> list[str]:
    """stressed_samples.jsonl (what the monitors saw), robustness.csv and robustness.png; the names
    written ([] without stress)."""
    if not stressed_samples:
        return []
    from automon.report import plots  # matplotlib: only when there are figures to draw

    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / "stressed_samples.jsonl", "".join(s.to_json() + "\n" for s in stressed_samples))
    rows = tables.robustness_rows([m.describe() for m in monitors], docs)
    tables.write_robustness_csv(rows, out_dir / "robustness.csv")
    plots.robustness_plot(rows, out_dir / markdown.ROBUSTNESS_FIGURE)
    return ["stressed_samples.jsonl", "robustness.csv", markdown.ROBUSTNESS_FIGURE]


def _curves(rows: Sequence[Mapping[str, Any]], subsets: Sequence[str]) -> dict[str, Any]:
    curves = {"overall": curve_for(rows)}
    for sub in subsets:
        curves[sub] = curve_for([r for r in rows if r["subset"] == sub])
    return curves


def _points(doc: Mapping[str, Any], subsets: Sequence[str]) -> dict[str, tuple[float, float]]:
    pts = {"overall": (doc["overall"]["far"], doc["overall"]["mr"])}
    for sub in subsets:
        g = doc["by_subset"].get(sub)
        if g:
            pts[sub] = (g["far"], g["mr"])
    return pts


def write_outputs(c: Any, out_dir: Path, monitors: Sequence[Monitor], preds: Mapping[str, list],
                  docs: Mapping[str, dict], kind: str, write_to: Path | None = None,
                  stressed_samples: Sequence[Sample] = ()) -> list[Path]:
    """The output files of `out_dir`, written under `write_to` (a staging dir, automon.evaluation.publish)
    when given; the paths returned are under it too. wandb mirrors under the name of `out_dir`."""
    from automon.report import plots  # matplotlib: only when there are figures to draw

    final, out_dir = out_dir, write_to or out_dir

    subsets = [s for s in c.data.subsets if any(r["subset"] == s for r in next(iter(preds.values())))]
    robust = write_robustness(out_dir, monitors, docs, stressed_samples)
    curves = {m.row: _curves(clean_rows(preds[m.name]), subsets) for m in monitors}
    points = {m.row: _points(docs[m.name], subsets) for m in monitors}
    has_scores = any(cv for per in curves.values() for cv in per.values())
    images: dict[str, Path] = {"robustness": out_dir / markdown.ROBUSTNESS_FIGURE} if robust else {}
    written: list[Path] = []

    def monitor_files(d: Path, m: Monitor, figure: bool, extra: Sequence[str] = ()) -> list[str]:
        d.mkdir(parents=True, exist_ok=True)
        write_predictions(d / "predictions.jsonl", preds[m.name])
        write_json(d / "metrics.json", docs[m.name])
        files = ["predictions.jsonl", "metrics.json", "report.md", *extra]
        if figure and has_scores:
            plots.curves_plot({m.row: curves[m.row]}, {m.row: points[m.row]}, d / "curves.png")
            images["curves"] = d / "curves.png"
            files.append("curves.png")
        (d / "report.md").write_text(markdown.monitor_report(docs[m.name], files), encoding="utf-8")
        return files

    if not c.sweep_dir and len(monitors) == 1:
        m = monitors[0]
        files = monitor_files(out_dir, m, figure=True, extra=robust)
        written += [out_dir / f for f in files]
        _mirror(c, final, monitors, docs, None, images)
        return written

    # ---- a sweep, or a backend with several monitors of its own (probes): one folder per monitor + the matrix
    for m in monitors:
        monitor_files(out_dir / "monitors" / m.name, m, figure=False)
    described = [m.describe() for m in monitors]
    rows, mmd, fused, pareto = _matrix_files(out_dir, monitors, described, docs, subsets, images)
    files = ["matrix.csv", "matrix.md", "heatmap.png", "pareto.png", "metrics.json", "report.md", *robust]
    if has_scores:
        plots.curves_plot(curves, points, out_dir / "curves.png")
        images["curves"] = out_dir / "curves.png"
        files.insert(4, "curves.png")
    files.append("monitors/<name>/{predictions.jsonl, metrics.json, report.md}")
    head, top = _sweep_document(c, monitors, preds, docs, rows, pareto, fused)
    write_json(out_dir / "metrics.json", top)
    report = markdown.sweep_report(head, mmd, described, docs, pareto, files)
    (out_dir / "report.md").write_text(report, encoding="utf-8")
    _mirror(c, final, monitors, docs, rows, images)
    return [out_dir / f for f in files if "<" not in f]


def _matrix_files(out_dir: Path, monitors: Sequence[Monitor], described: list, docs: Mapping[str, dict],
                  subsets: list[str], images: dict[str, Path]):
    """matrix.csv, matrix.md (with MOOD's fusion gain), heatmap.png and pareto.png of a sweep:
    (matrix rows, matrix markdown, fused monitors, pareto points)."""
    from automon.report import plots  # matplotlib: only when there are figures to draw

    rows = tables.matrix_rows(described, docs, subsets)
    tables.write_matrix_csv(rows, out_dir / "matrix.csv")
    mmd = tables.matrix_md(rows)
    fused = [(m.row, docs[m.name]["fusion"]["judge"], docs[m.name]["fusion"]) for m in monitors
             if "fusion" in docs[m.name]]
    if fused:  # MOOD's question: does fusion raise held-out detection at 1% FAR?
        mmd += "\n" + tables.fusion_gain_md(fused)
    (out_dir / "matrix.md").write_text(mmd, encoding="utf-8")
    plots.heatmap(rows, out_dir / "heatmap.png",
                  title=f"{docs[monitors[0].name]['title'].split(' + ')[0]}: MR and FAR by training x test subset")
    images["heatmap"] = out_dir / "heatmap.png"
    pareto = plots.pareto_plot([(m.row, docs[m.name]["overall"]["mr"], docs[m.name]["overall"]["far"])
                                for m in monitors], out_dir / "pareto.png")
    images["pareto"] = out_dir / "pareto.png"
    return rows, mmd, fused, pareto


def _sweep_document(c: Any, monitors: Sequence[Monitor], preds: Mapping[str, list], docs: Mapping[str, dict],
                    rows: list, pareto: Any, fused: list) -> tuple[dict, dict]:
    """(the sweep's shared header, its metrics.json): the header of the first monitor's document with
    every monitor's caveats and the requests of all, then each monitor's metrics, the matrix and pareto."""
    head = {k: v for k, v in docs[monitors[0].name].items()
            if k not in ("monitor", "overall", "by_subset", "by_category", "by_task", "cache", "title", "robustness")}
    # every monitor's caveats (an adapter of another build is CONTAMINATED), each once, in order
    head["caveats"] = list(dict.fromkeys(n for m in monitors for n in docs[m.name].get("caveats") or []))
    head["title"] = (f"Held-out transfer matrix: {c.sweep_dir or c.backend.model_label(c.model)} "
                     f"({len(monitors)} monitors)")
    head["requests"] = request_summary([r for m in monitors for r in clean_rows(preds[m.name])], c.max_failed_share)
    head["requests"]["complete"] = all(requests_complete(docs[m.name]) for m in monitors)
    groups = ("overall", "by_subset", "by_category", "by_task")
    top = {**head, "monitors": {m.name: {"monitor": m.describe(), **{k: docs[m.name][k] for k in groups},
                                         **({"robustness": docs[m.name]["robustness"]}
                                            if "robustness" in docs[m.name] else {})}
                                for m in monitors},
           "matrix": rows, "pareto": pareto}
    if fused:
        top["fusion_gain"] = {label: {"judge": judge, "lambda": info["lambda"], "by_subset": info["gain_over_judge"]}
                              for label, judge, info in fused}
    return head, top


def _mirror(c: Any, out_dir: Path, monitors: Sequence[Monitor], docs: Mapping[str, dict],
            matrix: Sequence[Mapping[str, Any]] | None, images: Mapping[str, Path]) -> None:
    if c.wandb.mode == "disabled":
        return
    from omegaconf import OmegaConf

    from automon.report.wandb_log import eval_summary, eval_tables, mirror  # wandb: only when mirroring

    described = [m.describe() for m in monitors]
    mirror(c.wandb, out_dir, out_dir.name, OmegaConf.to_container(OmegaConf.structured(c)),
           eval_summary(described, docs), eval_tables(described, docs, matrix), images)
