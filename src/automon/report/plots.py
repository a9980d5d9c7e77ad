"""Figures: transfer-matrix heatmap, MR-FAR Pareto scatter, MR-FAR curves over P(yes) thresholds.

All axes put FAR on x and MR on y, so the best monitors sit in the lower left.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from automon.metrics import pareto_front, pearson_r  # noqa: E402
from automon.report.columns import delta_columns  # noqa: E402


def _nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def heatmap(rows: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """MR and FAR by training subset (rows) x test subset (columns); with a base row, a second line
    of panels shows the change against the base model."""
    labels = list(dict.fromkeys(r["row"] for r in rows))
    cols = list(dict.fromkeys(r["test"] for r in rows))
    cell = {(r["row"], r["test"]): r for r in rows}
    has_base = "base" in labels
    compared = delta_columns()
    panels = [(c.key, c.title, False) for c in compared]
    if has_base:
        panels += [(f"d_{c.key}", f"Δ {c.title.lower()} vs base", True) for c in compared]
    ncols = len(compared)
    nrows = len(panels) // ncols
    fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                             figsize=(0.95 * len(cols) * ncols + 4.5, (0.62 * len(labels) + 2.0) * nrows + 0.6))
    for ax, (key, name, diverging) in zip(axes.ravel(), panels):
        z = np.array([[_val(cell.get((lab, c)), key) for c in cols] for lab in labels], dtype=float)
        if diverging:
            lim = max(0.05, float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 0.05)
            im = ax.imshow(z, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        else:
            im = ax.imshow(z, cmap="viridis_r", vmin=0.0, vmax=1.0, aspect="auto")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
        for i, lab in enumerate(labels):
            for j, c in enumerate(cols):
                v = z[i, j]
                if diverging and lab == "base":
                    txt = ""
                else:
                    txt = "—" if math.isnan(v) else (f"{v:+.2f}" if diverging else f"{v:.2f}")
                r = cell.get((lab, c))
                bold = bool(r and r.get("in_distribution"))
                # white text on the dark end of each colour map
                shade = (abs(v) / lim > 0.6) if diverging and not math.isnan(v) else (not math.isnan(v) and v > 0.55)
                ax.text(j, i, txt, ha="center", va="center", fontsize=8, fontweight="bold" if bold else "normal",
                        color="white" if shade else "black", in_layout=False)
                if bold:
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=1.8, ec="black"))
        ax.set_xticks(range(len(cols)), cols, rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("tested on")
        ax.set_ylabel("trained on")
        ax.set_title(name, fontsize=10)
    fig.suptitle(title or "Held-out transfer matrix (boxed: in-distribution)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _val(r: Mapping[str, Any] | None, key: str) -> float:
    if r is None or _nan(r.get(key)):
        return math.nan
    return float(r[key])


def pareto_plot(points: Sequence[tuple[str, float, float]], path: Path, title: str = "") -> dict[str, Any]:
    """Scatter of (label, MR, FAR) per monitor with the Pareto front and Pearson r between MR and FAR."""
    labels = [p[0] for p in points]
    mr = [float("nan") if _nan(p[1]) else float(p[1]) for p in points]
    far = [float("nan") if _nan(p[2]) else float(p[2]) for p in points]
    front = pareto_front(mr, far)
    r = pearson_r(mr, far)
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    ax.scatter(far, mr, s=36, color="tab:blue", zorder=3, label="monitor")
    if front:
        fx = [far[i] for i in sorted(front, key=lambda i: far[i])]
        fy = [mr[i] for i in sorted(front, key=lambda i: far[i])]
        ax.step(fx, fy, where="post", color="tab:red", lw=1.4, zorder=2, label="Pareto front")
        ax.scatter(fx, fy, s=70, facecolors="none", edgecolors="tab:red", zorder=4)
    placed: list[tuple[float, float]] = []
    for lab, x, y in sorted(zip(labels, far, mr), key=lambda t: (t[1], t[2])):
        if math.isnan(x) or math.isnan(y):
            continue
        near = sum(1 for px, py in placed if abs(px - x) < 0.08 and abs(py - y) < 0.04)
        placed.append((x, y))  # stack labels of nearby monitors instead of overprinting them
        ax.annotate(lab, (x, y), textcoords="offset points", xytext=(6, 4 - 11 * near), fontsize=8)
    ax.plot([0, 1], [1, 0], ls=":", color="grey", lw=1, label="chance (MR + FAR = 1)")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("false alarm rate (FAR)")
    ax.set_ylabel("miss rate (MR)")
    n_ok = sum(1 for a, b in zip(mr, far) if not (math.isnan(a) or math.isnan(b)))
    rtxt = "n/a (fewer than 3 monitors)" if math.isnan(r) else f"{r:+.2f} (n = {n_ok})"
    ax.set_title((title + "\n" if title else "") + f"MR vs FAR, Pearson r = {rtxt}", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return {"pareto_front": [labels[i] for i in front], "pearson_r": r}


def curves_plot(curves: Mapping[str, Mapping[str, Mapping[str, list] | None]],
                points: Mapping[str, Mapping[str, tuple[float, float]]], path: Path, title: str = "") -> Path:
    """MR-FAR curves over P(yes) thresholds: one panel per test group, one line per monitor.

    `curves[monitor][group]` is metrics.mr_far_curve output (or None without P(yes));
    `points[monitor][group]` = (FAR, MR) at the configured threshold (marked with a dot).
    """
    groups: list[str] = []
    for per in curves.values():
        for g in per:
            if g not in groups:
                groups.append(g)
    n = max(1, len(groups))
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.4 * nrows + 0.6), squeeze=False)
    ticks = [0.0, 0.25, 0.5, 0.75, 1.0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, g in zip(axes.ravel(), groups):
        for k, (mon, per) in enumerate(curves.items()):
            col = colors[k % len(colors)]
            c = per.get(g)
            if c:
                ax.plot(c["far"], c["mr"], color=col, lw=1.3, label=mon, drawstyle="steps-post")
            pt = points.get(mon, {}).get(g)
            if pt and not (_nan(pt[0]) or _nan(pt[1])):
                ax.plot([pt[0]], [pt[1]], "o", color=col, ms=5, label=None if c else mon)
        ax.plot([0, 1], [1, 0], ls=":", color="grey", lw=0.8)
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_title(g, fontsize=9)
        ax.set_xlabel("FAR", fontsize=8)
        ax.set_ylabel("MR", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(groups):]:
        ax.axis("off")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(title or "MR-FAR curves over thresholds of P(yes) (dot: the configured threshold)", fontsize=10)
    _fixed_grid_margins(fig, nrows, ncols, bottom=0.85 if handles else 0.5)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fixed_grid_margins(fig, nrows: int, ncols: int, *, bottom: float, left: float = 0.55, right: float = 0.15,
                        top: float = 0.8, gap_w: float = 0.6, gap_h: float = 0.75) -> None:
    """Margins and gaps in inches for a grid of panels whose labels are the same in every panel (the
    curves: fixed 0..1 ticks, "FAR"/"MR"), in place of tight_layout, which draws the whole figure once
    more to measure them. With the fixed ticks, a ten-panel figure of four monitors took 0.9-1.2 s
    instead of 2.0-2.5 s on 2 CPU cores; test_report checks that every label stays inside and apart."""
    width, height = fig.get_size_inches()
    ax_w = (width - left - right - (ncols - 1) * gap_w) / ncols
    ax_h = (height - top - bottom - (nrows - 1) * gap_h) / nrows
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=gap_w / ax_w, hspace=gap_h / ax_h)


def robustness_plot(rows: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Clean vs stressed per monitor: a dumbbell per (monitor, stress) from its clean to its stressed
    MR (left) and FAR (right), overall over the pairs the stress covers. `rows`: report.tables.robustness_rows."""
    pts = [r for r in rows if r["test"] == "overall"]
    labels = [f"{r['row']} · {r['stress']}" for r in pts]
    fig, axes = plt.subplots(1, 2, sharey=True, figsize=(9.0, 0.34 * len(pts) + 1.8), squeeze=False)
    y = np.arange(len(pts))[::-1]
    for ax, key, name in zip(axes[0], ("mr", "far"), ("miss rate (MR)", "false alarm rate (FAR)")):
        a = np.array([_val(r, f"{key}_clean") for r in pts])
        b = np.array([_val(r, f"{key}_stressed") for r in pts])
        ax.hlines(y, np.fmin(a, b), np.fmax(a, b), color="grey", lw=1.6, zorder=1)
        ax.scatter(a, y, s=34, color="tab:blue", zorder=3, label="clean")
        ax.scatter(b, y, s=40, color="tab:red", marker="X", zorder=3, label="stressed")
        ax.set_xlim(-0.03, 1.03)
        ax.set_xlabel(name)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(y, labels, fontsize=8)
    axes[0][1].legend(fontsize=8, loc="lower right")
    fig.suptitle(title or "Clean vs stressed, same pairs (lower is better)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
