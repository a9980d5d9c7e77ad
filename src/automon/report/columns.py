"""The metric columns of every table an evaluation writes, listed once.

report.md's table by group, the sweep's table of monitors, matrix.csv and matrix.md, the wandb tables
and summary, and the console line all take their metric columns from METRIC_COLUMNS: a metric added
here appears in each of them, in the same order.

A column is a key of one group of `automon.group_metrics.group_metrics` (overall, a subset, ...), the
header it gets in markdown, how its cell is written, and the `automon.metrics` function that computes
it. CSV and wandb cells hold numbers, so a column with a confidence interval becomes three (`mr`,
`mr_lo`, `mr_hi`) and `mr_at_far` one per FAR target (`mr_at_far_0.05`); a markdown cell holds the
interval ("0.412 [0.301, 0.520]").

The evidence columns (`Column.evidence`: gold coverage, evidence hit, evidence precision, right for the
right reason) exist only for monitors that quote their evidence (an evidence prompt). A table has them
when some monitor in it quotes (`quotes_in`), and a monitor that does not has empty cells there ("" in
CSV, null in wandb, "—" in markdown); a table without such a monitor has exactly the columns it had
before they existed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from automon import metrics as M
from automon.group_metrics import group_metrics
from automon.controls import CONTROL_KINDS

NAN = float("nan")
Group = Mapping[str, Any]  # one group of group_metrics(): {"n": ..., "mr": ..., "mr_ci": [lo, hi], ...}


def is_nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt(x: Any, nd: int = 3) -> str:
    return "—" if is_nan(x) else f"{x:.{nd}f}"


def fmt_ci(x: Any, ci: Sequence[Any] | None, nd: int = 3) -> str:
    if is_nan(x):
        return "—"
    if not ci or is_nan(ci[0]) or is_nan(ci[1]):
        return fmt(x, nd)
    return f"{x:.{nd}f} [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]"


def far_keys(group: Group) -> list[str]:
    """The FAR targets a group was computed for ("0.05", ...), in order."""
    return list(group.get("mr_at_far") or {})


@dataclass(frozen=True)
class Column:
    key: str                      # the key in a metrics group
    header: str                   # markdown header (and the console line)
    source: Callable[..., Any]    # the automon.metrics (or group_metrics) function that computes the value
    count: bool = False           # an integer, written as is (else a rate or score, 3 decimals)
    ci: bool = False              # has a bootstrap interval under `<key>_ci`
    per_far_target: bool = False  # a dict keyed by FAR target
    definition: str = ""          # for the legend under report.md's table
    # Compared against the base model in a sweep (`d_<key>` in the matrix, a pivot table in
    # matrix.md, heatmap panels); such a column is an error rate, so lower is better. `title` names it.
    delta: bool = False
    title: str = ""
    brief: bool = False           # also in the sweep's monitor table, the console line and the wandb summary
    # per_far_target with its own fixed keys (det_at_far: automon.metrics.DETECTION_FARS) instead of the
    # evaluation's far_targets
    fixed_keys: tuple[str, ...] = ()
    # only for monitors that quote (a group has the key where its monitor does): see the module's note
    evidence: bool = False

    def _fkeys(self, fkeys: Sequence[str]) -> Sequence[str]:
        return self.fixed_keys or fkeys

    # ---- numbers (CSV, wandb)

    def names(self, fkeys: Sequence[str], deltas: bool = False) -> list[str]:
        if self.per_far_target:
            return [f"{self.key}_{k}" for k in self._fkeys(fkeys)]
        out = [self.key] + ([f"{self.key}_lo", f"{self.key}_hi"] if self.ci else [])
        return out + ([f"d_{self.key}"] if deltas and self.delta else [])

    def values(self, g: Group, fkeys: Sequence[str], deltas: bool = False, base: Group | None = None) -> list[Any]:
        """Values in `names` order; with `deltas`, the change against `base` (NaN without a base)."""
        if self.per_far_target:
            return [(g.get(self.key) or {}).get(k, NAN) for k in self._fkeys(fkeys)]
        if self.evidence and self.key not in g:  # a monitor that does not quote
            return [NAN] * len(self.names(fkeys, deltas))
        out = [g[self.key]] + (list(g[f"{self.key}_ci"]) if self.ci else [])
        if deltas and self.delta:
            out.append(g[self.key] - base[self.key] if base is not None else NAN)
        return out

    # ---- text (markdown, console)

    def headers(self, fkeys: Sequence[str]) -> list[str]:
        if self.per_far_target:
            return [f"{self.header}{k}" for k in self._fkeys(fkeys)]
        return [f"{self.header} [95% CI]" if self.ci else self.header]

    def cells(self, g: Group, fkeys: Sequence[str]) -> list[str]:
        if self.per_far_target:
            return [fmt((g.get(self.key) or {}).get(k)) for k in self._fkeys(fkeys)]
        if self.evidence and self.key not in g:  # a monitor that does not quote
            return [fmt(None)]
        v = g[self.key]
        if self.count:
            return [str(v)]
        return [fmt_ci(v, g[f"{self.key}_ci"]) if self.ci else fmt(v)]


METRIC_COLUMNS: tuple[Column, ...] = (
    Column("n", "n", group_metrics, count=True),
    Column("tp", "TP", M.confusion, count=True),
    Column("fn", "FN", M.confusion, count=True),
    Column("fp", "FP", M.confusion, count=True),
    Column("tn", "TN", M.confusion, count=True),
    Column("mr", "MR", M.miss_rate, ci=True, definition="FN/(TP+FN)", delta=True, title="Miss rate", brief=True),
    Column("far", "FAR", M.false_alarm_rate, ci=True, definition="FP/(TN+FP)", delta=True,
           title="False alarm rate", brief=True),
    Column("auroc", "AUROC", M.auroc, brief=True),
    Column("mr_at_far", "MR@FAR≤", M.mr_at_far, per_far_target=True,
           definition="lowest MR over P(yes) thresholds whose FAR is at most x"),
    Column("det_at_far", "Det@refFAR", M.detection_at_threshold, per_far_target=True,
           fixed_keys=tuple(M.far_key(t) for t in M.DETECTION_FARS),
           definition="detection rate (1 - MR) at the threshold that flags at most x of the benign samples of "
                      "the monitor's training distribution (eval far_reference=true), the same threshold on "
                      "every test subset"),
    Column("pair_accuracy", "pair acc.", M.pair_accuracy, brief=True,
           definition="share of pairs whose misbehavior twin scores above its benign twin (ties count 1/2)"),
    # Contrast controls (wordings v9, automon.controls): n, TP..TN, MR, FAR, AUROC and pair accuracy
    # above are the paired core's (the paper's numbers); these are the benign samples that carry one
    # part of a misbehavior alone. NaN ("—") on a build or subset without them.
    Column("far_benign", "FAR all benign", M.false_alarm_rate, ci=True,
           definition="FP/(TN+FP) over every benign sample, contrast controls included"),
    *(Column(f"far_{kind}", f"FAR {kind}", M.false_alarm_rate, ci=True,
             definition=f"FP/(TN+FP) on the {kind} controls ({k.carries}, not {k.lacks.split(':')[0]})")
      for kind, k in CONTROL_KINDS.items()),
    # Evidence against gold spans (automon.evidence, automon.metrics.EVIDENCE_RATIOS), monitors that quote only:
    # over the misbehavior samples that carry gold evidence, which gold coverage counts.
    Column("n_gold", "n gold", M.evidence_counts, count=True, evidence=True,
           definition="misbehavior samples with gold evidence, over which the evidence columns are computed"),
    Column("gold_coverage", "gold coverage", M.evidence_counts, evidence=True, brief=True,
           definition="n gold / misbehavior samples"),
    Column("evidence_hit", "evidence hit", M.evidence_rates, ci=True, evidence=True,
           definition="share of the flagged misbehavior samples with gold where a quote is on a gold span"),
    Column("evidence_precision", "evidence precision", M.evidence_rates, ci=True, evidence=True,
           definition="share of the quotes of those samples that are on a gold span"),
    Column("rrr", "RRR", M.evidence_rates, ci=True, evidence=True, brief=True,
           definition="right for the right reason: flagged with a quote on a gold span / misbehavior samples "
                      "with gold"),
    Column("unparseable", "unparseable", group_metrics, count=True, brief=True),
    Column("errors", "errors", group_metrics, count=True, brief=True),
)


def quotes_in(groups: Iterable[Group]) -> bool:
    """Whether some group has the evidence figures (its monitor quotes): then a table of them has the
    evidence columns."""
    return any("rrr" in g for g in groups)


def columns(brief: bool = False, evidence: bool = False) -> tuple[Column, ...]:
    """The metric columns in order (`brief`: the short list); the evidence columns only with `evidence`."""
    return tuple(c for c in METRIC_COLUMNS if (c.brief or not brief) and (evidence or not c.evidence))


def delta_columns() -> tuple[Column, ...]:
    return tuple(c for c in METRIC_COLUMNS if c.delta)


def metric_names(fkeys: Sequence[str], deltas: bool = False, brief: bool = False, evidence: bool = False) -> list[str]:
    return [n for c in columns(brief, evidence) for n in c.names(fkeys, deltas)]


def metric_values(g: Group, fkeys: Sequence[str], deltas: bool = False, base: Group | None = None,
                  brief: bool = False, evidence: bool = False) -> list[Any]:
    return [v for c in columns(brief, evidence) for v in c.values(g, fkeys, deltas, base)]


def metric_headers(fkeys: Sequence[str], brief: bool = False, evidence: bool = False) -> list[str]:
    return [lab for c in columns(brief, evidence) for lab in c.headers(fkeys)]


def metric_cells(g: Group, fkeys: Sequence[str], brief: bool = False, evidence: bool = False) -> list[str]:
    return [x for c in columns(brief, evidence) for x in c.cells(g, fkeys)]


def legend(evidence: bool = False) -> str:
    """The definitions of the columns that have one, for the note under a table (the evidence columns'
    with `evidence`)."""
    parts = []
    for c in columns(evidence=evidence):
        if c.definition:
            parts.append(f"{c.header}x: {c.definition}" if c.per_far_target else f"{c.header} = {c.definition}")
    return "; ".join(parts)


# ---------------------------------------------------------------- robustness (stress=)

@dataclass(frozen=True)
class ChangeColumn:
    """A metric compared between the clean pairs a stress covers and their stressed copies
    (metrics.json "robustness" ... "change"): the clean value, the stressed value and the change
    (stressed - clean) with its paired pair-bootstrap CI."""
    key: str                      # the key in a robustness cell's "change"
    header: str
    source: Callable[..., Any]    # the automon.metrics function that computes the value
    higher_is_worse: bool         # an error rate (MR, FAR) rather than a score (AUROC, detection)
    definition: str = ""

    def names(self) -> list[str]:
        return [f"{self.key}_clean", f"{self.key}_stressed", f"d_{self.key}", f"d_{self.key}_lo", f"d_{self.key}_hi"]

    def values(self, cell: Group) -> list[Any]:
        ch = cell["change"][self.key]
        return [ch["clean"], ch["stressed"], ch["change"], *ch["change_ci"]]

    def headers(self) -> list[str]:
        return [f"{self.header} clean", f"{self.header} stressed", f"Δ{self.header} [95% CI]"]

    def cells(self, cell: Group) -> list[str]:
        ch = cell["change"][self.key]
        d = "—" if is_nan(ch["change"]) else (f"{ch['change']:+.3f}" + (
            "" if is_nan(ch["change_ci"][0]) else f" [{ch['change_ci'][0]:+.3f}, {ch['change_ci'][1]:+.3f}]"))
        return [fmt(ch["clean"]), fmt(ch["stressed"]), d]


ROBUSTNESS_COLUMNS: tuple[ChangeColumn, ...] = (
    ChangeColumn("mr", "MR", M.miss_rate, True, "FN/(TP+FN) at the configured threshold"),
    ChangeColumn("far", "FAR", M.false_alarm_rate, True, "FP/(TN+FP) at the configured threshold"),
    ChangeColumn("auroc", "AUROC", M.auroc, False, "over P(yes), samples scored in both sets"),
    ChangeColumn("det", "Det@1%FAR", M.detection_at_threshold, False,
                 "detection rate (1 - MR) at one threshold for both sets, set at 1% FAR"),
)


def robustness_legend() -> str:
    return "; ".join(f"{c.header}: {c.definition}" for c in ROBUSTNESS_COLUMNS)
