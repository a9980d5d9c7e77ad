"""Tables for report.md and the transfer matrix (CSV and markdown); metric columns from report.columns."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping, Sequence

from automon.report.columns import (
    ROBUSTNESS_COLUMNS,
    delta_columns,
    far_keys,
    fmt_ci,
    is_nan,
    legend,
    robustness_legend,
    metric_cells,
    metric_headers,
    metric_names,
    metric_values,
    quotes_in,
)
from automon.schema import SUBSETS

OVERALL = "overall"
# What identifies a matrix row; the metric columns follow (report.columns).
MATRIX_ID = ("row", "monitor", "trained_on", "test", "in_distribution")
GROUPS = ("by_subset", "by_category", "by_task")


def fmt_delta(d: Any, nd: int = 2) -> str:
    return "" if is_nan(d) else f" ({d:+.{nd}f})"


def md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def groups_of(m: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(grouping, group name, metrics) for overall, each subset, each category, each task."""
    out = [(OVERALL, OVERALL, m["overall"])]
    for by in GROUPS:
        out += [(by[3:], g, v) for g, v in m.get(by, {}).items()]
    return out


def metrics_table_md(m: Mapping[str, Any]) -> str:
    """One row per group: overall, each subset, each category, each task."""
    fk = far_keys(m["overall"])
    ev = quotes_in([m["overall"]])
    rows = [[OVERALL if by == OVERALL else f"{by}: {g}", *metric_cells(v, fk, evidence=ev)] for by, g, v in groups_of(m)]
    return md_table(["group", *metric_headers(fk, evidence=ev)], rows)


def metrics_legend(evidence: bool = False) -> str:
    return (f"{legend(evidence)}; — = undefined (empty denominator or no P(yes)). CIs: percentile bootstrap "
            "resampling pairs (a contrast control with the pair of its source item).")


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
    ev = quotes_in(metrics[m["name"]]["overall"] for m in monitors)  # the evidence columns, if any monitor quotes
    out = []
    for label in row_order(list(by_label)):
        mon = by_label[label]
        for col in [*test_subsets, OVERALL]:
            g = _cell(metrics[mon["name"]], col)
            if g is None:
                continue
            b = _cell(metrics[base["name"]], col) if base else None
            fk = far_keys(g)
            out.append({
                "row": label, "monitor": mon["name"], "trained_on": mon.get("trained_on"), "test": col,
                "in_distribution": bool(mon.get("trained_on") and mon.get("trained_on") == col),
                **dict(zip(metric_names(fk, deltas=True, evidence=ev),
                           metric_values(g, fk, deltas=True, base=b, evidence=ev))),
            })
    return out


def matrix_fields(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The columns of matrix.csv and of the wandb matrix table: matrix_rows builds every row with
    the same keys, in column order."""
    return list(rows[0]) if rows else list(MATRIX_ID)


def _cell(m: Mapping[str, Any], col: str) -> Mapping[str, Any] | None:
    return m["overall"] if col == OVERALL else m["by_subset"].get(col)


def write_matrix_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    fields = matrix_fields(rows)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if is_nan(r[k]) else (f"{r[k]:.6f}" if isinstance(r[k], float) else r[k]))
                        for k in fields})


def matrix_md(rows: Sequence[Mapping[str, Any]]) -> str:
    """Two tables (MR, FAR): rows = training subset, columns = test subset; cells = value [CI] (Δ vs base).
    In-distribution cells (trained and tested on the same subset) are bold. Where some monitor quotes its
    evidence, a third: right for the right reason (RRR [CI], with the number of samples with gold)."""
    labels = list(dict.fromkeys(r["row"] for r in rows))
    cols = list(dict.fromkeys(r["test"] for r in rows))
    cell = {(r["row"], r["test"]): r for r in rows}
    parts = []
    for col in delta_columns():
        metric = col.key
        lines = [f"### {col.title} ({col.header} = {col.definition}), lower is better", "",
                 "| trained on \\ tested on | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
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
    note = ("Cells: point estimate [95% bootstrap CI, pairs resampled, a contrast control with its pair] (change against the base model). "
            "Bold: in-distribution (trained and tested on the same subset).")
    if rows and "rrr" in rows[0]:  # some monitor quotes its evidence (report.columns: the evidence columns)
        lines = ["### Right for the right reason (RRR = flagged with a quote on a gold span / misbehavior samples "
                 "with gold evidence), higher is better", "",
                 "| trained on \\ tested on | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for lab in labels:
            cells = []
            for c in cols:
                r = cell.get((lab, c))
                txt = "" if r is None else fmt_ci(r["rrr"], (r["rrr_lo"], r["rrr_hi"]), 2) + (
                    "" if is_nan(r["n_gold"]) else f" ({r['n_gold']} gold)")
                cells.append(f"**{txt}**" if r is not None and r["in_distribution"] else txt)
            lines.append(f"| {lab} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
        note += (" RRR cells: over the misbehavior samples that carry gold evidence (\"n gold\": how many); "
                 "— for a monitor that does not quote.")
    return "\n\n".join(parts) + "\n\n" + note + "\n"


def fusion_gain_md(fused: Sequence[tuple[str, str, Mapping[str, Any]]], far: str = "0.010") -> str:
    """The gain of each fused monitor over its judge alone in detection rate at `far` reference FAR, per
    test subset, and beside it the change in false-alarm rate at the same thresholds (a fused monitor
    that flags every off-distribution sample gains detection and false alarms alike): (fused label,
    judge label, its metrics.json "fusion" block) each; '' when none."""
    if not fused:
        return ""
    cols = list(dict.fromkeys(k for _, _, info in fused for k in info["gain_over_judge"]))

    def table(title: str, key: str) -> list[str]:
        lines = [title, "", "| fused monitor (λ) | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for label, judge, info in fused:
            cells = []
            for col in cols:
                g = info["gain_over_judge"].get(col)
                if g is None or key not in g[far]:
                    cells.append("")
                    continue
                txt = fmt_ci(g[far][key], g[far][f"{key}_ci"], 2)
                cells.append(txt if g["held_out"] else f"_{txt}_")
            lam = info.get("lambda")
            name = f"{label} vs {judge}" + (f" (λ={lam:g})" if info.get("fusion") == "lambda" else "")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        return lines

    pct = f"{float(far):.1%}"
    lines = table(f"### Fusion gain: detection rate at {pct} reference FAR, fused minus judge alone", "gain")
    lines += [""] + table(f"### False-alarm change at the same thresholds ({pct} reference FAR), fused minus "
                          "judge alone", "far_change")
    note = ("Cells: change [95% bootstrap CI, pairs resampled; both monitors on the same replicate]. Each monitor "
            "flags at its own threshold from benign in-distribution calibration samples of its training split. "
            "Italic: not held out (the monitor's training subset, overall, or a base model). A detection gain "
            "is worth something only where the false-alarm change beside it is small.")
    return "\n".join(lines) + "\n\n" + note + "\n"


# ---------------------------------------------------------------- robustness (stress=)

# What identifies a robustness.csv row; the ROBUSTNESS_COLUMNS follow. Its own file, not matrix.csv:
# a row is (monitor, stress, test subset) and its columns are clean / stressed / change, not the matrix's.
ROBUSTNESS_ID = ("row", "monitor", "stress", "test", "n", "n_pairs")


def robustness_rows(monitors: Sequence[Mapping[str, Any]], metrics: Mapping[str, Mapping[str, Any]]
                    ) -> list[dict[str, Any]]:
    """One row per monitor x stress x (each subset it covers, then overall); [] without stress.
    `monitors` are Monitor.describe() dicts, `metrics[name]` has the monitor's "robustness"."""
    out = []
    for mon in monitors:
        rob = metrics[mon["name"]].get("robustness")
        if not rob:
            continue
        for stress, per in rob["by_stress"].items():
            for test, cell in [*per["by_subset"].items(), (OVERALL, per["overall"])]:
                out.append({"row": mon["label"], "monitor": mon["name"], "stress": stress, "test": test,
                            "n": cell["n"], "n_pairs": cell["n_pairs"],
                            **{k: v for col in ROBUSTNESS_COLUMNS for k, v in zip(col.names(), col.values(cell))}})
    return out


def write_robustness_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    write_matrix_csv(rows, path)


def robustness_md(monitors: Sequence[Mapping[str, Any]], metrics: Mapping[str, Mapping[str, Any]],
                  overall_only: bool = False) -> str:
    """The Robustness table: a line per monitor x stress x group (only `overall` with overall_only)."""
    head = ["monitor", "stress", "test", "pairs", *[h for col in ROBUSTNESS_COLUMNS for h in col.headers()]]
    lines = []
    for mon in monitors:
        rob = metrics[mon["name"]].get("robustness")
        for stress, per in (rob or {}).get("by_stress", {}).items():
            groups = [(OVERALL, per["overall"])] + ([] if overall_only else list(per["by_subset"].items()))
            for test, cell in groups:
                lines.append([mon["label"], stress, test, str(cell["n_pairs"]),
                              *[x for col in ROBUSTNESS_COLUMNS for x in col.cells(cell)]])
    return md_table(head, lines) if lines else ""


def robustness_note(rob: Mapping[str, Any]) -> str:
    """What the Robustness table's numbers are (under it in report.md)."""
    stresses = "; ".join(f"**{n}** (v{s['version']}, {', '.join(s['subsets'])}; {s['n_pairs']} pairs): {s['threat']}"
                         for n, s in rob["stresses"].items())
    thr = ("the monitor's reference threshold at 1% FAR (far_reference)" if rob["detection_threshold"] == "reference"
           else "the threshold that flags at most 1% of the group's clean benign samples")
    return (f"Stresses (seed {rob['seed']}): {stresses}. Clean = the clean pairs each stress covers, stressed = their "
            f"stressed copies; Δ = stressed - clean [95% CI of the change: the same pair-bootstrap resample for "
            f"both]. Det@1%FAR flags at {thr}, the same for both sets. {robustness_legend()}. A Δ whose CI "
            "holds 0 is no measured change at this n; a random or tiny model's change measures nothing about "
            "monitors.")
