"""Tables for report.md and the transfer matrix (CSV and markdown)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from automon.schema import SUBSETS

OVERALL = "overall"
MATRIX_FIELDS = ("row", "monitor", "trained_on", "test", "in_distribution", "n", "mr", "mr_lo", "mr_hi",
                 "far", "far_lo", "far_hi", "d_mr", "d_far", "auroc", "pair_accuracy", "unparseable", "errors")


def _nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt(x: Any, nd: int = 3) -> str:
    return "—" if _nan(x) else f"{x:.{nd}f}"


def fmt_ci(x: Any, ci: Sequence[Any] | None, nd: int = 3) -> str:
    if _nan(x):
        return "—"
    if not ci or _nan(ci[0]) or _nan(ci[1]):
        return fmt(x, nd)
    return f"{x:.{nd}f} [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]"


def fmt_delta(d: Any, nd: int = 2) -> str:
    return "" if _nan(d) else f" ({d:+.{nd}f})"


def metrics_table_md(m: Mapping[str, Any], far_targets: Sequence[float]) -> str:
    """One row per group: overall, each subset, each category, each task."""
    keys = [f"{t:.2f}" for t in far_targets]
    head = (["group", "n", "TP", "FN", "FP", "TN", "MR [95% CI]", "FAR [95% CI]", "AUROC"]
            + [f"MR@FAR≤{k}" for k in keys] + ["pair acc.", "unparseable", "errors"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    groups = [(OVERALL, m["overall"])]
    for by in ("by_subset", "by_category", "by_task"):
        groups += [(f"{by[3:]}: {g}", v) for g, v in m.get(by, {}).items()]
    for name, g in groups:
        cells = [name, str(g["n"]), str(g["tp"]), str(g["fn"]), str(g["fp"]), str(g["tn"]),
                 fmt_ci(g["mr"], g["mr_ci"]), fmt_ci(g["far"], g["far_ci"]), fmt(g["auroc"])]
        cells += [fmt(g["mr_at_far"].get(k)) for k in keys]
        cells += [fmt(g["pair_accuracy"]), str(g["unparseable"]), str(g["errors"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def row_order(labels: Sequence[str]) -> list[str]:
    """base first, then training subsets in canonical order, then `all`, then anything else."""
    order = ["base", *SUBSETS, "all"]
    known = [x for x in order if x in labels]
    return known + sorted(x for x in labels if x not in order)


def matrix_rows(monitors: Sequence[Mapping[str, Any]], metrics: Mapping[str, Mapping[str, Any]],
                test_subsets: Sequence[str]) -> list[dict[str, Any]]:
    """Long-format matrix: one row per (monitor, test subset or overall), with deltas vs base.

    `monitors` are Monitor.describe() dicts; `metrics[name]` is that monitor's compute_metrics().
    """
    by_label = {m["label"]: m for m in monitors}
    base = next((m for m in monitors if m["label"] == "base"), None)
    out = []
    for label in row_order(list(by_label)):
        mon = by_label[label]
        for col in [*test_subsets, OVERALL]:
            g = _cell(metrics[mon["name"]], col)
            if g is None:
                continue
            b = _cell(metrics[base["name"]], col) if base else None
            out.append({
                "row": label, "monitor": mon["name"], "trained_on": mon.get("trained_on"), "test": col,
                "in_distribution": bool(mon.get("trained_on") and mon.get("trained_on") == col),
                "n": g["n"], "mr": g["mr"], "mr_lo": g["mr_ci"][0], "mr_hi": g["mr_ci"][1],
                "far": g["far"], "far_lo": g["far_ci"][0], "far_hi": g["far_ci"][1],
                "d_mr": (g["mr"] - b["mr"]) if b else math.nan, "d_far": (g["far"] - b["far"]) if b else math.nan,
                "auroc": g["auroc"], "pair_accuracy": g["pair_accuracy"],
                "unparseable": g["unparseable"], "errors": g["errors"],
            })
    return out


def _cell(m: Mapping[str, Any], col: str) -> Mapping[str, Any] | None:
    return m["overall"] if col == OVERALL else m["by_subset"].get(col)


def write_matrix_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=MATRIX_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if _nan(r[k]) else (f"{r[k]:.6f}" if isinstance(r[k], float) else r[k]))
                        for k in MATRIX_FIELDS})


def matrix_md(rows: Sequence[Mapping[str, Any]]) -> str:
    """Two tables (MR, FAR): rows = training subset, columns = test subset; cells = value [CI] (Δ vs base).
    In-distribution cells (trained and tested on the same subset) are bold."""
    labels = list(dict.fromkeys(r["row"] for r in rows))
    cols = list(dict.fromkeys(r["test"] for r in rows))
    cell = {(r["row"], r["test"]): r for r in rows}
    parts = []
    for metric, title in (("mr", "Miss rate (MR = FN/(TP+FN)), lower is better"),
                          ("far", "False alarm rate (FAR = FP/(TN+FP)), lower is better")):
        lines = [f"### {title}", "", "| trained on \\ tested on | " + " | ".join(cols) + " |",
                 "|---|" + "---|" * len(cols)]
        for lab in labels:
            cells = []
            for c in cols:
                r = cell.get((lab, c))
                if r is None:
                    cells.append("")
                    continue
                txt = fmt_ci(r[metric], (r[f"{metric}_lo"], r[f"{metric}_hi"]), 2)
                if lab != "base":
                    txt += fmt_delta(r[f"d_{metric}"])
                cells.append(f"**{txt}**" if r["in_distribution"] else txt)
            lines.append(f"| {lab} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    note = ("Cells: point estimate [95% bootstrap CI, pairs resampled] (change against the base model). "
            "Bold: in-distribution (trained and tested on the same subset).")
    return "\n\n".join(parts) + "\n\n" + note + "\n"
