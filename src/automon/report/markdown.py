"""report.md for one monitor and for a sweep."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from automon.report.columns import far_keys, fmt, fmt_ci, metric_cells, metric_headers, quotes_in
from automon.report.tables import md_table, metrics_legend, metrics_table_md, robustness_md, robustness_note

ROBUSTNESS_FIGURE = "robustness.png"

POLICY_TEXT = {
    "wrong": "scored as wrong (a miss on misbehavior, a false alarm on benign)",
    "positive": "scored as flagged (pred 1)",
    "negative": "scored as not flagged (pred 0)",
    "exclude": "left out of MR/FAR (they can flatter a monitor; see the counts)",
}


def header_table(doc: Mapping[str, Any]) -> str:
    mon = doc.get("monitor") or {}
    model = doc["model"]
    rows = [
        ("model", f"{model['name']} (`{model['pretrained']}`"
         + (f" @ {model['revision']}" if model.get("revision") else "")
         + f", enable_thinking={model['enable_thinking']})"),
        ("backend", doc["backend"]),
        ("prompt", f"{doc['prompt']}, {doc['shots']} shot(s)"
         + (f" (seed {doc['shots_seed']}: {', '.join(doc['shot_ids'])})" if doc["shots"] else "")),
        ("benchmark", doc["data"].get("release") or "not recorded (an evaluation made before releases)"),
        ("data", f"`{doc['data']['dir']}` (manifest sha256 {doc['data']['manifest_hash'][:12]}), "
                 f"subsets {', '.join(doc['data']['subsets'])}"),
        ("threshold", f"pred = P(yes) >= {doc['threshold']}" if doc["prompt_kind"] == "direct"
         else "pred = parsed JSON verdict (P(true) at the verdict token feeds AUROC and curves)"),
        ("unparseable / failed answers", POLICY_TEXT[doc["unparseable_policy"]]),
        ("bootstrap", f"{doc['bootstrap']['n']} replicates resampling pairs, seed {doc['bootstrap']['seed']}, "
                      f"{int(doc['bootstrap']['ci'] * 100)}% percentile CI"),
        ("versions", f"{doc['metrics_version']}"
                     + (f" + {doc['evidence_version']}" if doc.get("evidence_version") else "")
                     + f", {doc['prompt']} ({doc['prompt_fit']}), code {doc['code_version']}"),
    ]
    if mon:
        rows.insert(1, ("monitor", _monitor_text(mon)))
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows) + "\n"


def _artifact(mon: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A monitor document's trained artifact and its hash: (`artifact`, `artifact_hash`), or as documents
    written before the rename spell them (`adapter`, `adapter_hash`, a probe's directory included)."""
    if "artifact" in mon:
        return mon["artifact"], mon.get("artifact_hash")
    return mon.get("adapter"), mon.get("adapter_hash")


def _monitor_text(mon: Mapping[str, Any]) -> str:
    path, digest = _artifact(mon)
    if not path:
        return "base model (no adapter)"
    if mon.get("kind") == "probe":
        return f"probe `{mon['name']}` trained on {mon['label']} (`{path}`, identity sha256 {(digest or '')[:12]})"
    txt = f"adapter `{path}` (sha256 {(digest or '')[:12]}, rank {mon['lora_rank']})"
    if mon.get("trained_on"):
        txt += f", trained on {mon['trained_on']}"
    if mon.get("mismatches"):
        txt += " — **evaluated despite: " + "; ".join(mon["mismatches"]) + "** (allow_mismatch=true)"
    return txt


def monitor_report(doc: Mapping[str, Any], files: Sequence[str]) -> str:
    o = doc["overall"]
    title = doc.get("title", "Held-out evaluation")
    lines = [f"# {title}", "", *incomplete_banner(doc), *caveats_banner(doc), *not_scored_banner(doc),
             header_table(doc), "## Overall", "",
             f"MR {fmt_ci(o['mr'], o['mr_ci'])}, FAR {fmt_ci(o['far'], o['far_ci'])}, AUROC {fmt(o['auroc'])}, "
             f"pair accuracy {fmt(o['pair_accuracy'])} over {o['n_pairs']} pairs (n = {o['n']}).", "",
             f"Unparseable answers: **{o['unparseable']}**; failed requests: **{o['errors']}** "
             f"({POLICY_TEXT[doc['unparseable_policy']]}). Responses shortened to fit the context: "
             f"{doc['n_shortened']}.", "",
             *evidence_lines(o),
             "## By group", "", metrics_table_md(doc), metrics_legend(quotes_in([o])), "",
             *robustness_lines([{"name": "", "label": (doc.get("monitor") or {}).get("label", "monitor")}],
                               {"": doc}, ROBUSTNESS_FIGURE in files),
             "## Files", ""] + [f"- `{f}`" for f in files]
    return "\n".join(lines) + "\n"


def evidence_lines(o: Mapping[str, Any]) -> list[str]:
    """The Overall section's sentence on a quoting monitor's evidence against the gold spans; [] for a
    monitor that does not quote."""
    if not quotes_in([o]):
        return []
    return [f"Right for the right reason (flagged with a quote on a gold span): **{fmt_ci(o['rrr'], o['rrr_ci'])}**; "
            f"evidence hit {fmt_ci(o['evidence_hit'], o['evidence_hit_ci'])} of the {o['n_flagged_gold']} flagged, "
            f"evidence precision {fmt_ci(o['evidence_precision'], o['evidence_precision_ci'])}. Over the "
            f"{o['n_gold']} of {o['n_pos']} misbehavior samples that carry gold evidence (gold coverage "
            f"{fmt(o['gold_coverage'])}); the others are not counted. What each answer quoted: predictions.jsonl "
            "(`quotes`, `on_gold`).", ""]


def incomplete_banner(doc: Mapping[str, Any]) -> list[str]:
    """The lines that open an incomplete evaluation's report (too many failed requests)."""
    req = doc.get("requests") or {}
    if req.get("complete", True):
        return []
    return [f"**INCOMPLETE: {req['failed']} of {req['n']} requests failed** (more than max_failed_share="
            f"{req['max_failed_share']}; first error: {req.get('first_error') or '?'}). The metrics below score "
            "failed requests by the unparseable policy and measure nothing; rerun the same command once the "
            "backend works (failed requests are not cached, so only they are sent again).", ""]


def caveats_banner(doc: Mapping[str, Any]) -> list[str]:
    """The lines that open a report whose numbers carry no finding (automon.evaluation.caveats)."""
    notes = doc.get("caveats") or []
    if not notes:
        return []
    return ["**Read this first:**", "", *[f"- **{n}**" for n in notes], ""]


def not_scored_banner(doc: Mapping[str, Any]) -> list[str]:
    """The training runs of a sweep_dir that have no adapter (unfinished, failed), so are not in it."""
    runs = doc.get("not_scored") or []
    if not runs:
        return []
    return [f"**Not scored: {len(runs)} training run(s) in the sweep have no adapter** (the matrix lacks their "
            "rows):", "", *[f"- {r}" for r in runs], ""]


def sweep_report(doc: Mapping[str, Any], matrix_markdown: str, monitors: Sequence[Mapping[str, Any]],
                 metrics: Mapping[str, Mapping[str, Any]], pareto: Mapping[str, Any], files: Sequence[str]) -> str:
    fk = far_keys(metrics[monitors[0]["name"]]["overall"]) if monitors else []
    ev = quotes_in(metrics[m["name"]]["overall"] for m in monitors)
    table = md_table(["row", "monitor", *metric_headers(fk, brief=True, evidence=ev), "report"],
                     [[m["label"], m["name"], *metric_cells(metrics[m["name"]]["overall"], fk, brief=True, evidence=ev),
                       f"[report](monitors/{m['name']}/report.md)"] for m in monitors])
    lines = [f"# {doc.get('title', 'Held-out transfer matrix')}", "", *incomplete_banner(doc), *caveats_banner(doc),
             *not_scored_banner(doc), header_table(doc),
             "## Transfer matrix", "", matrix_markdown, "## Monitors (overall)", "", table.rstrip("\n")]
    r = pareto.get("pearson_r")
    lines += ["", f"Pareto front (lowest MR and FAR): {', '.join(pareto.get('pareto_front', [])) or '—'}; "
                  f"Pearson r(MR, FAR) across monitors = {fmt(r, 2)}.", "",
              *robustness_lines(monitors, metrics, ROBUSTNESS_FIGURE in files, overall_only=True), "## Files", ""]
    lines += [f"- `{f}`" for f in files]
    return "\n".join(lines) + "\n"


def robustness_lines(monitors: Sequence[Mapping[str, Any]], metrics: Mapping[str, Mapping[str, Any]],
                     figure: bool, overall_only: bool = False) -> list[str]:
    """report.md's Robustness section (stress=): clean vs stressed per monitor and stress; [] without."""
    table = robustness_md(monitors, metrics, overall_only)
    if not table:
        return []
    rob = next(metrics[m["name"]]["robustness"] for m in monitors if metrics[m["name"]].get("robustness"))
    lines = ["## Robustness", "", table.rstrip("\n"), "", robustness_note(rob), ""]
    if overall_only:
        lines += ["Per subset: robustness.csv and each monitor's report.", ""]
    if figure:
        lines += [f"![clean vs stressed]({ROBUSTNESS_FIGURE})", ""]
    return lines
