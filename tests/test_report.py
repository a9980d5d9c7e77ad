"""Report pieces: matrix rows and deltas, markdown tables, figures (written and readable)."""

from __future__ import annotations

import math

import pytest
from matplotlib.image import imread

from automon.metrics import compute_metrics, curve_for
from automon.report import markdown, plots, tables


def _rows(seed, subsets=("safety_code", "sg_code")):
    import random

    rng = random.Random(seed)
    out = []
    for sub in subsets:
        for k in range(10):
            for lab in (1, 0):
                p = min(max(rng.random() * 0.6 + 0.3 * lab, 0), 1)
                out.append({"id": f"{sub}{k}{lab}", "pair_id": f"{sub}{k}", "subset": sub, "category": "safety",
                            "task": "code", "label": lab, "p_yes": p, "pred": int(p >= 0.5)})
    return out


@pytest.fixture(scope="module")
def sweep():
    mons = [{"name": "base", "label": "base", "trained_on": None},
            {"name": "run_sg", "label": "sg_code", "trained_on": "sg_code"},
            {"name": "run_sc", "label": "safety_code", "trained_on": "safety_code"}]
    preds = {m["name"]: _rows(i) for i, m in enumerate(mons)}
    mets = {n: compute_metrics(r, n_boot=50) for n, r in preds.items()}
    return mons, preds, mets


def test_matrix_rows_order_deltas_and_diagonal(sweep):
    mons, _, mets = sweep
    rows = tables.matrix_rows(mons, mets, ["safety_code", "sg_code"])
    assert [r["row"] for r in rows[::3]] == ["base", "safety_code", "sg_code"]  # canonical row order
    assert len(rows) == 3 * 3
    cell = {(r["row"], r["test"]): r for r in rows}
    assert cell[("base", "sg_code")]["d_mr"] == 0.0
    d = cell[("sg_code", "sg_code")]
    assert d["in_distribution"] and not cell[("sg_code", "safety_code")]["in_distribution"]
    assert d["d_far"] == pytest.approx(mets["run_sg"]["by_subset"]["sg_code"]["far"]
                                       - mets["base"]["by_subset"]["sg_code"]["far"])
    md = tables.matrix_md(rows)
    assert md.count("| trained on \\ tested on |") == 2 and "**" in md and ("(+" in md or "(-" in md)


def test_matrix_without_base_has_no_deltas(sweep, tmp_path):
    mons, _, mets = sweep
    rows = tables.matrix_rows(mons[1:], mets, ["safety_code", "sg_code"])
    assert all(math.isnan(r["d_mr"]) for r in rows)
    tables.write_matrix_csv(rows, tmp_path / "m.csv")
    assert ",," in (tmp_path / "m.csv").read_text()  # NaN written as an empty cell
    plots.heatmap(rows, tmp_path / "h.png")
    assert imread(tmp_path / "h.png").shape[0] > 100


def test_figures_are_written(sweep, tmp_path):
    mons, preds, mets = sweep
    rows = tables.matrix_rows(mons, mets, ["safety_code", "sg_code"])
    plots.heatmap(rows, tmp_path / "heatmap.png")
    pts = [(m["label"], mets[m["name"]]["overall"]["mr"], mets[m["name"]]["overall"]["far"]) for m in mons]
    info = plots.pareto_plot(pts, tmp_path / "pareto.png")
    assert info["pareto_front"] and not math.isnan(info["pearson_r"])
    curves = {m["label"]: {"overall": curve_for(preds[m["name"]]), "sg_code": None} for m in mons}
    points = {m["label"]: {"overall": (0.3, 0.4)} for m in mons}
    plots.curves_plot(curves, points, tmp_path / "curves.png")
    for f in ("heatmap.png", "pareto.png", "curves.png"):
        assert imread(tmp_path / f).shape[1] > 300
    two = plots.pareto_plot(pts[:2], tmp_path / "p2.png")
    assert math.isnan(two["pearson_r"])  # fewer than 3 monitors: undefined, said so in the title


def test_metrics_table_shows_dashes_for_undefined(sweep):
    _, _, mets = sweep
    m = dict(mets["base"])
    m["overall"] = {**m["overall"], "auroc": float("nan"), "mr": float("nan")}
    md = tables.metrics_table_md(m, [0.05, 0.10])
    assert "MR@FAR≤0.05" in md and "| overall |" in md and "—" in md


def test_monitor_report_states_policy_and_counts(sweep):
    _, _, mets = sweep
    doc = {**mets["base"], "title": "t", "model": {"name": "tiny", "pretrained": "tiny", "revision": None,
                                                    "enable_thinking": False},
           "backend": "hf", "prompt": "direct_v1", "prompt_kind": "direct", "prompt_fit": "fit_v1",
           "shots": 0, "shots_seed": 0,
           "shot_ids": [], "data": {"dir": "d", "manifest_hash": "ab" * 32, "subsets": ["sg_code"]},
           "threshold": 0.5, "unparseable_policy": "positive", "bootstrap": {"n": 50, "seed": 0, "ci": 0.95},
           "metrics_version": "metrics_v1", "code_version": "x", "n_shortened": 3,
           "monitor": {"adapter": None}}
    text = markdown.monitor_report(doc, [0.05, 0.1], ["predictions.jsonl"])
    assert "scored as flagged" in text and "Unparseable answers: **0**" in text and "shortened" in text


def test_wandb_mirror_writes_an_offline_run(tmp_path, sweep):
    from types import SimpleNamespace

    from automon.report.wandb_log import mirror

    mons, _, mets = sweep
    rows = tables.matrix_rows(mons, mets, ["safety_code", "sg_code"])
    plots.heatmap(rows, tmp_path / "heatmap.png")
    cfg = SimpleNamespace(mode="offline", project="automon-test", entity=None, dir=None)
    cols = list(tables.MATRIX_FIELDS)
    from automon.metrics import to_jsonable

    mirror(cfg, tmp_path, "test-run", {"k": 1}, {"base/mr": 0.5},
           {"matrix": (cols, to_jsonable([[r[c] for c in cols] for r in rows]))}, {"heatmap": tmp_path / "heatmap.png"})
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert mirror(SimpleNamespace(mode="disabled"), tmp_path, "x", {}, {}, {}, {}) is None
