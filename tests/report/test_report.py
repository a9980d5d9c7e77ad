"""Report pieces: matrix rows and deltas, markdown tables, figures (written and readable)."""

from __future__ import annotations

import math

import pytest
from matplotlib.image import imread

from automon.group_metrics import compute_metrics, curve_for
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


@pytest.fixture()
def figures(monkeypatch):
    """The matplotlib figures the plot functions draw, kept when they close them after saving."""
    drawn = []
    close = plots.plt.close

    def keep(fig=None):
        drawn.append(fig)
        close(fig)

    monkeypatch.setattr(plots.plt, "close", keep)
    return drawn


def _saved_as(fig, path, dpi):
    """The PNG is that figure (its size in pixels) and not blank."""
    img = imread(path)
    w, h = fig.get_size_inches() * dpi
    assert abs(img.shape[0] - h) <= 1 and abs(img.shape[1] - w) <= 1
    assert img[..., :3].std() > 0.05


def _panels(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.images}


def test_matrix_without_base_has_no_deltas(sweep, tmp_path, figures):
    mons, _, mets = sweep
    rows = tables.matrix_rows(mons[1:], mets, ["safety_code", "sg_code"])
    assert all(math.isnan(r["d_mr"]) for r in rows)
    tables.write_matrix_csv(rows, tmp_path / "m.csv")
    assert ",," in (tmp_path / "m.csv").read_text()  # NaN written as an empty cell
    plots.heatmap(rows, tmp_path / "h.png")
    fig = figures[-1]
    _saved_as(fig, tmp_path / "h.png", 120)
    panels = _panels(fig)
    assert list(panels) == ["Miss rate", "False alarm rate"]  # no change-vs-base panels without a base
    mr = panels["Miss rate"]
    assert [t.get_text() for t in mr.get_yticklabels()] == ["safety_code", "sg_code"]
    assert [t.get_text() for t in mr.get_xticklabels()] == ["safety_code", "sg_code", "overall"]
    plotted = mr.images[0].get_array()
    for r in rows:
        i, j = ["safety_code", "sg_code"].index(r["row"]), ["safety_code", "sg_code", "overall"].index(r["test"])
        assert plotted[i, j] == pytest.approx(r["mr"])


def test_figures_show_the_data(sweep, tmp_path, figures):
    mons, preds, mets = sweep
    rows = tables.matrix_rows(mons, mets, ["safety_code", "sg_code"])
    plots.heatmap(rows, tmp_path / "heatmap.png")
    fig = figures[-1]
    _saved_as(fig, tmp_path / "heatmap.png", 120)
    panels = _panels(fig)
    assert list(panels) == ["Miss rate", "False alarm rate", "Δ miss rate vs base", "Δ false alarm rate vs base"]
    d_far = panels["Δ false alarm rate vs base"].images[0].get_array()
    labels, cols = ["base", "safety_code", "sg_code"], ["safety_code", "sg_code", "overall"]
    for r in rows:
        assert d_far[labels.index(r["row"]), cols.index(r["test"])] == pytest.approx(r["d_far"])
    boxed = {(round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in panels["Miss rate"].patches}
    assert boxed == {(labels.index(r["row"]), cols.index(r["test"])) for r in rows if r["in_distribution"]}

    pts = [(m["label"], mets[m["name"]]["overall"]["mr"], mets[m["name"]]["overall"]["far"]) for m in mons]
    info = plots.pareto_plot(pts, tmp_path / "pareto.png")
    fig = figures[-1]
    _saved_as(fig, tmp_path / "pareto.png", 120)
    assert info["pareto_front"] and not math.isnan(info["pearson_r"])
    ax = fig.axes[0]
    assert ax.collections[0].get_offsets().ravel().tolist() == pytest.approx([v for _, mr, far in pts for v in (far, mr)])
    assert f"Pearson r = {info['pearson_r']:+.2f}" in ax.get_title()

    curves = {m["label"]: {"overall": curve_for(preds[m["name"]]), "sg_code": None} for m in mons}
    points = {m["label"]: {"overall": (0.3, 0.4)} for m in mons}
    plots.curves_plot(curves, points, tmp_path / "curves.png")
    fig = figures[-1]
    _saved_as(fig, tmp_path / "curves.png", 110)
    by_title = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert list(by_title) == ["overall", "sg_code"]
    lines = {ln.get_label(): ln for ln in by_title["overall"].get_lines()}
    for label, per in curves.items():
        assert list(lines[label].get_xdata()) == per["overall"]["far"]
        assert list(lines[label].get_ydata()) == per["overall"]["mr"]
    # no P(yes) curve and no point for sg_code: only the chance diagonal is drawn there
    assert [list(ln.get_xdata()) for ln in by_title["sg_code"].get_lines()] == [[0, 1]]
    two = plots.pareto_plot(pts[:2], tmp_path / "p2.png")
    assert math.isnan(two["pearson_r"]) and "n/a" in figures[-1].axes[0].get_title()


def test_metrics_table_shows_dashes_for_undefined(sweep):
    _, _, mets = sweep
    m = dict(mets["base"])
    m["overall"] = {**m["overall"], "auroc": float("nan"), "mr": float("nan")}
    md = tables.metrics_table_md(m)
    assert "MR@FAR≤0.05" in md and "| overall |" in md and "—" in md


_HEADER = {"model": {"name": "tiny", "pretrained": "tiny", "revision": None, "enable_thinking": False},
           "backend": "hf", "prompt": "direct_v1", "prompt_kind": "direct", "prompt_fit": "fit_v1", "shots": 0, "shots_seed": 0,
           "shot_ids": [], "data": {"dir": "d", "manifest_hash": "ab" * 32, "subsets": ["sg_code"]},
           "threshold": 0.5, "unparseable_policy": "positive", "bootstrap": {"n": 50, "seed": 0, "ci": 0.95},
           "metrics_version": "metrics_v1", "code_version": "x", "n_shortened": 3}


def test_monitor_report_states_policy_and_counts(sweep):
    _, _, mets = sweep
    doc = {**mets["base"], "title": "t", **_HEADER, "monitor": {"artifact": None, "artifact_hash": None}}
    text = markdown.monitor_report(doc, ["predictions.jsonl"])
    assert "scored as flagged" in text and "Unparseable answers: **0**" in text and "shortened" in text


@pytest.mark.parametrize("mon", [
    {"name": "run_sg", "label": "sg_code", "kind": "lora", "lora_rank": 32, "trained_on": "sg_code", "mismatches": []},
    {"name": "lexical-sg_code", "label": "sg_code", "kind": "probe", "lora_rank": None, "trained_on": None,
     "mismatches": []},
    {"name": "base", "label": "base", "kind": "lora", "lora_rank": None, "trained_on": None, "mismatches": []},
], ids=["adapter", "probe", "base"])
def test_a_monitor_document_renders_the_same_before_and_after_the_artifact_rename(sweep, mon):
    """metrics.json written before Monitor.artifact_dir was named so spells its keys adapter/adapter_hash
    (docs/results/ holds such documents): the report reads both spellings alike."""
    _, _, mets = sweep
    path, digest = (None, None) if mon["name"] == "base" else (f"/runs/{mon['name']}/adapter", "cd" * 32)
    old = {**mon, "adapter": path, "adapter_hash": digest}
    new = {**mon, "artifact": path, "artifact_hash": digest}
    texts = [markdown.monitor_report({**mets["base"], "title": "t", **_HEADER, "monitor": m}, []) for m in (old, new)]
    assert texts[0] == texts[1]
    shown = ["base model (no adapter)"] if path is None else [f"`{path}`", "sha256 cdcdcdcdcdcd"]
    assert all(s in texts[0] for s in shown)


def test_wandb_mirror_writes_an_offline_run(tmp_path, sweep):
    from types import SimpleNamespace

    from automon.report.wandb_log import eval_summary, eval_tables, mirror

    mons, _, mets = sweep
    rows = tables.matrix_rows(mons, mets, ["safety_code", "sg_code"])
    plots.heatmap(rows, tmp_path / "heatmap.png")
    cfg = SimpleNamespace(mode="offline", project="automon-test", entity=None, dir=None)
    mirror(cfg, tmp_path, "test-run", {"k": 1}, eval_summary(mons, mets), eval_tables(mons, mets, rows),
           {"heatmap": tmp_path / "heatmap.png"})
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert mirror(SimpleNamespace(mode="disabled"), tmp_path, "x", {}, {}, {}, {}) is None


# ---------------------------------------------------------------- one column spec

def _csv_header(path):
    return path.read_text().splitlines()[0].split(",")


def _md_header(md, at=0):
    return [c.strip() for c in md.splitlines()[at].strip("|").split("|")]


def test_one_column_spec_feeds_csv_markdown_and_wandb(sweep, tmp_path):
    from automon.report import columns
    from automon.report.wandb_log import eval_summary, eval_tables

    mons, _, mets = sweep
    fk = ["0.05", "0.10"]
    rows = tables.matrix_rows(mons, mets, ["safety_code", "sg_code"])
    tables.write_matrix_csv(rows, tmp_path / "m.csv")
    csv_cols = _csv_header(tmp_path / "m.csv")
    wandb = eval_tables(mons, mets, rows)
    md_cols = _md_header(tables.metrics_table_md(mets["base"]))
    # the same metric columns, in the same order, in each (CSV and wandb split a CI into _lo/_hi)
    assert csv_cols == [*tables.MATRIX_ID, *columns.metric_names(fk, deltas=True)]
    assert wandb["matrix"][0] == csv_cols
    assert wandb["metrics"][0] == ["monitor", "row", "group_by", "group", *columns.metric_names(fk)]
    assert md_cols == ["group", *columns.metric_headers(fk)]
    # one markdown cell per column, per FAR target for mr_at_far and per detection budget for det_at_far;
    # no evidence columns: no monitor here quotes (tests/evaluation/test_evidence_eval.py has them)
    from automon.metrics import DETECTION_FARS

    assert len(md_cols) - 1 == len(columns.columns()) + len(fk) - 1 + len(DETECTION_FARS) - 1
    assert len(columns.columns()) == len(columns.METRIC_COLUMNS) - sum(c.evidence for c in columns.METRIC_COLUMNS)
    assert "det_at_far_0.010" in csv_cols and "Det@refFAR0.010" in md_cols
    # and the cells hold the group's numbers
    o = mets["base"]["overall"]
    overall = dict(zip(wandb["metrics"][0], wandb["metrics"][1][0]))
    assert overall["group"] == "overall" and overall["tp"] == o["tp"] and overall["mr_hi"] == o["mr_ci"][1]
    assert overall["mr_at_far_0.10"] == o["mr_at_far"]["0.10"]
    md_overall = dict(zip(md_cols, _md_header(tables.metrics_table_md(mets["base"]), at=2)))
    assert md_overall["TP"] == str(o["tp"]) and md_overall["MR [95% CI]"].startswith(f"{o['mr']:.3f} [")
    assert set(eval_summary(mons, mets)) == {f"{m['label']}/{n}" for m in mons
                                             for n in columns.metric_names([], brief=True)}


def test_a_column_added_to_the_spec_appears_in_every_table(sweep, tmp_path, monkeypatch):
    from automon.group_metrics import group_metrics
    from automon.report import columns
    from automon.report.wandb_log import eval_tables

    extra = columns.Column("n_scored", "scored", group_metrics, count=True, brief=True)
    monkeypatch.setattr(columns, "METRIC_COLUMNS", (*columns.METRIC_COLUMNS, extra))
    mons, _, mets = sweep
    rows = tables.matrix_rows(mons, mets, ["safety_code", "sg_code"])
    tables.write_matrix_csv(rows, tmp_path / "m.csv")
    assert _csv_header(tmp_path / "m.csv")[-1] == "n_scored"
    assert all(t[0][-1] == "n_scored" for t in eval_tables(mons, mets, rows).values())
    assert _md_header(tables.metrics_table_md(mets["base"]))[-1] == "scored"
    described = [{**m, "adapter": None} for m in mons]
    sweep_md = markdown.sweep_report({"title": "t", **_HEADER}, tables.matrix_md(rows), described, mets,
                                     {"pareto_front": [], "pearson_r": float("nan")}, [])
    table = sweep_md[sweep_md.index("## Monitors (overall)"):].splitlines()[2]
    assert _md_header(table)[-2] == "scored"  # the sweep's brief table too (before the report link)


@pytest.mark.parametrize("n_groups", [1, 4, 7, 10])
def test_the_curves_figures_fixed_margins_keep_every_label_inside_and_apart(tmp_path, figures, n_groups):
    """curves_plot lays its panels out in fixed inches (no tight_layout pass): for one to three rows
    of panels, every panel's ticks, labels and title lie inside the figure and clear of the other
    panels and of the legend."""
    groups = ["overall", *(f"subset_{i}" for i in range(n_groups - 1))]
    curve = {"far": [0.0, 0.2, 0.5, 1.0], "mr": [1.0, 0.6, 0.3, 0.0]}
    curves = {m: {g: curve for g in groups} for m in ("base", "a_long_monitor_name")}
    plots.curves_plot(curves, {m: {g: (0.3, 0.4) for g in groups} for m in curves}, tmp_path / "curves.png")
    fig = figures[-1]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # closed, the figure lost its Agg canvas
    whole = fig.bbox
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_title()]
    assert len(boxes) == n_groups
    for box in boxes:
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1, (box, whole)
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1:]), "two panels' labels overlap"
    legend = fig.legends[0].get_window_extent(renderer)
    assert whole.y0 <= legend.y0 and not any(legend.overlaps(b) for b in boxes)
    title = fig._suptitle.get_window_extent(renderer)
    assert title.y1 <= whole.y1 and not any(title.overlaps(b) for b in boxes)
