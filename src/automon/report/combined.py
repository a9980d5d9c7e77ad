"""One matrix over several evaluations of the same build (pipeline.py eval.also): LLM judges,
adapters and probes side by side, a row each, with the same metric columns, CIs and plots.

Each evaluation keeps its own outputs; this reads their metrics.json (a sweep's or a single
monitor's), names every monitor `<evaluation>: <row>` and writes <out>/{matrix.csv, matrix.md,
heatmap.png, pareto.png, metrics.json, report.md}. `publish` copies that plus each evaluation's
report, metrics, config and predictions (gzipped) to a directory meant to be committed.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

from automon.errors import UserError
from automon.outdir import check_publish_dest, output_files, replace_published
from automon.report import markdown, plots, tables
from automon.report.columns import far_keys, metric_cells, metric_headers, quotes_in
from automon.schema import SUBSETS

GROUPS = ("overall", "by_subset", "by_category", "by_task")


def _monitors(top: dict) -> dict[str, dict]:
    """name -> {"monitor": describe(), overall, by_subset, ...} for a sweep's or one monitor's metrics.json."""
    if "monitors" in top:
        return top["monitors"]
    return {top["monitor"]["name"]: {"monitor": top["monitor"],
                                     **{k: top[k] for k in (*GROUPS, "robustness") if k in top}}}


def _provenance(name: str, d: Path, top: dict) -> dict[str, Any]:
    model = top.get("model") or {}
    return {"evaluation": name, "dir": str(d), "backend": top.get("backend"), "model": model.get("pretrained"),
            "prompt": top.get("prompt"), "n_test": top["data"]["n_test"],
            "max_pairs_per_subset": top["data"]["max_pairs_per_subset"],
            "data_manifest_hash": top["data"]["manifest_hash"], "code_version": top.get("code_version"),
            "caveats": top.get("caveats") or []}


class CombineError(UserError):
    """The evaluations cannot be put in one matrix (not an evaluation's results, different builds)."""


def _evaluation_metrics(d: Path) -> dict:
    """An evaluation's metrics.json; CombineError for one that is missing or not an evaluation's (a combined
    report's, which has no "data": the output of one landed on the other)."""
    try:
        top = json.loads((d / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CombineError(f"{d}/metrics.json cannot be read ({e})", str(d / "metrics.json"),
                           "rerun the evaluation that writes there") from None
    if not isinstance(top, dict) or not isinstance(top.get("data"), dict) or not ("monitors" in top or "monitor" in top):
        raise CombineError(f"{d}/metrics.json is not an evaluation's results (a combined report's, or another "
                           "file)", str(d / "metrics.json"),
                           "give each evaluation and the combined report directories of their own, and rerun")
    return top


def combine(evals: Mapping[str, Path], out: Path, title: str) -> Path:
    described: list[dict] = []
    metrics: dict[str, dict] = {}
    prov = []
    for ev, d in evals.items():
        top = _evaluation_metrics(Path(d))
        prov.append(_provenance(ev, Path(d), top))
        for name, m in _monitors(top).items():
            key = f"{ev}/{name}"
            described.append({**m["monitor"], "name": key, "label": f"{ev}: {m['monitor']['label']}"})
            metrics[key] = m
    hashes = {p["data_manifest_hash"] for p in prov}
    if len(hashes) != 1:
        raise CombineError(f"the evaluations scored different builds ({sorted(hashes)}): a combined matrix "
                           "would compare different test sets", "data.dir",
                           "score every evaluation of eval.also on the build of the main one")
    subsets = [s for s in SUBSETS if any(s in m["by_subset"] for m in metrics.values())]
    rows = tables.matrix_rows(described, metrics, subsets)
    out.mkdir(parents=True, exist_ok=True)
    for name in _combined_files():  # all rewritten below but the robustness ones, which a run without stress=
        (out / name).unlink(missing_ok=True)  # lacks: an earlier run's must not be published as this one's
    tables.write_matrix_csv(rows, out / "matrix.csv")
    mmd = tables.matrix_md(rows)
    (out / "matrix.md").write_text(mmd, encoding="utf-8")
    robust = tables.robustness_rows(described, metrics)  # stress=: clean vs stressed, every monitor
    if robust:
        tables.write_robustness_csv(robust, out / "robustness.csv")
        plots.robustness_plot(robust, out / markdown.ROBUSTNESS_FIGURE)
    plots.heatmap(rows, out / "heatmap.png", title=f"{title}: MR and FAR by monitor x test subset")
    pareto = plots.pareto_plot([(m["label"], metrics[m["name"]]["overall"]["mr"], metrics[m["name"]]["overall"]["far"])
                                for m in described], out / "pareto.png")
    caveats = list(dict.fromkeys(c for p in prov for c in p["caveats"]))
    doc = {"title": title, "evaluations": prov, "caveats": caveats, "data_manifest_hash": hashes.pop(),
           "monitors": {m["name"]: {"monitor": m, **{k: metrics[m["name"]][k] for k in (*GROUPS, "robustness")
                                                     if k in metrics[m["name"]]}} for m in described},
           "matrix": rows, "pareto": pareto}
    (out / "metrics.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(_report(doc, mmd, described, metrics), encoding="utf-8")
    return out


def _combined_files() -> tuple[str, ...]:
    """Every file `combine` writes in its directory."""
    return ("matrix.csv", "matrix.md", "robustness.csv", markdown.ROBUSTNESS_FIGURE, "heatmap.png", "pareto.png",
            "metrics.json", "report.md")


def _report(doc: dict, mmd: str, described: list[dict], metrics: Mapping[str, dict]) -> str:
    fk = far_keys(metrics[described[0]["name"]]["overall"])
    ev = tables.md_table(["evaluation", "backend", "model", "prompt", "test samples scored", "pairs/subset cap",
                          "report"],
                         [[p["evaluation"], p["backend"], f"`{p['model']}`", p["prompt"], str(p["n_test"]),
                           str(p["max_pairs_per_subset"] or "all"), f"[report]({p['evaluation']}/report.md)"]
                          for p in doc["evaluations"]])
    quoting = quotes_in(metrics[m["name"]]["overall"] for m in described)
    mons = tables.md_table(["monitor", *metric_headers(fk, brief=True, evidence=quoting)],
                           [[m["label"], *metric_cells(metrics[m["name"]]["overall"], fk, brief=True, evidence=quoting)]
                            for m in described])
    p0 = doc["evaluations"][0]
    lines = [f"# {doc['title']}", "", *markdown.caveats_banner(doc),
             f"Data manifest sha256 `{doc['data_manifest_hash'][:16]}`, code `{p0['code_version']}`. Each evaluation "
             "scores its own sample of the test set (its n below): compare rows within a column with their CIs.", "",
             "## Evaluations", "", ev.rstrip("\n"), "", "## Monitors (overall)", "", mons.rstrip("\n"), "",
             "## Matrix", "", mmd, "![heatmap](heatmap.png)", "", "![pareto](pareto.png)", "",
             *markdown.robustness_lines(described, metrics, figure=True, overall_only=True)]
    return "\n".join(lines)


# What publish copies of each evaluation, besides its predictions (gzipped)
_COPIED = ("report.md", "metrics.json", "config.yaml", "timing.json", "matrix.csv", "matrix.md", "heatmap.png",
           "curves.png", "pareto.png", "robustness.csv", "robustness.png")


def publish(evals: Mapping[str, Path], combined: Path, dest: Path, pipeline_state: Path | None = None) -> Path:
    """Copy what a reader needs to check every number: the combined results, and per evaluation its
    report, metrics, resolved config, timings and predictions (gzipped, byte-stable: no mtime), only files
    of its current output set (output_files: a stale robustness.csv or monitors/<old>/ of an earlier run
    is not passed off as this one's). `dest` must be new, empty or an earlier publish's (check_publish_dest);
    there the files its marker lists are replaced and every other file stays (replace_published). The copy
    is made in a temp dir beside it, removed whatever happens."""
    check_publish_dest(dest, [combined, *evals.values()])
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.publish-", dir=dest.parent))
    try:
        shutil.rmtree(tmp)
        shutil.copytree(combined, tmp)
        for ev, d in evals.items():
            _copy_evaluation(Path(d), tmp / ev)
        if pipeline_state is not None and Path(pipeline_state).exists():
            shutil.copy2(pipeline_state, tmp / "pipeline_state.json")
        check_publish_dest(dest, [combined, *evals.values()])  # again: it may have changed since start-up
        replace_published(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _copy_evaluation(d: Path, t: Path) -> None:
    own = output_files(d)  # None: results from before output sets listed their files
    t.mkdir(parents=True)
    for f in _COPIED:
        if (d / f).exists() and (own is None or f in own):
            shutil.copy2(d / f, t / f)
    preds = [d / f for f in own if Path(f).name == "predictions.jsonl"] if own is not None else \
        sorted(d.glob("**/predictions.jsonl"))
    if (d / "stressed_samples.jsonl").exists() and (own is None or "stressed_samples.jsonl" in own):
        preds.append(d / "stressed_samples.jsonl")  # what the monitors saw under stress=
    for pred in sorted(preds):
        rel = pred.relative_to(d)
        (t / rel.parent).mkdir(parents=True, exist_ok=True)
        with open(pred, "rb") as src, gzip.GzipFile(t / rel.parent / (rel.name + ".gz"), "wb", mtime=0) as gz:
            shutil.copyfileobj(src, gz)
        report = pred.parent / "report.md"
        if report.exists() and pred.parent != d:
            shutil.copy2(report, t / rel.parent / "report.md")
