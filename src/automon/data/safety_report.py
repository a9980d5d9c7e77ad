"""The safety subsets' annotation and artifact report (wordings with `safety_annotations`).

The shortcut audit's response-only ceiling asks whether a response's surface gives its label away
without the construct. In safety the misbehavior is in the response's own words (harmful help, an
injectable query), so a response-only model that reads them reads the construct: a high word or
character n-gram score is expected there, not a shortcut. What must not carry the label is what
cannot read harm: a response's length, its formatting and structure, and (code) its comments alone.
`artifact_report` scores those baselines (audit_panel members) on the test pairs of each safety subset
(those whose SubsetSpec.annotation chooses them), by pair-grouped cross-validation on the test split
itself (in distribution) and fitted on the training split; each must stay at or below
ARTIFACT_MAX_AUROC. `manifest_entry` is what the manifest records under "safety_annotations" (the
annotation summary, the test pairs shipped, this report).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Sequence

from automon.data.audit_panel import cross_validate, fit_predict
from automon.data.verdicts import verdicts_path
from automon.metrics import auroc, pair_accuracy
from automon.schema import Sample
from automon.subsets import annotated

log = logging.getLogger("automon.data")

ARTIFACT_MAX_AUROC = 0.65
CV_FOLDS = 5


def _rates(rows: Sequence[Sample], p) -> dict[str, float]:
    labels = [s.label for s in rows]
    return {"auroc": round(auroc(labels, list(p)), 4),
            "pair_accuracy": round(pair_accuracy(labels, list(p), [s.pair_id for s in rows])[0], 4)}


def artifact_members() -> dict[str, tuple[str, ...]]:
    """subset -> the artifact baselines scored on it: length and format, and a code task's comments."""
    return {s.name: ("length", "format") + (("comments",) if s.task == "code" else ()) for s in annotated()}


def artifact_report(train: Sequence[Sample], test: Sequence[Sample], seed: int) -> dict[str, Any]:
    """subset -> member -> {"test_cv": rates, "train_fit": rates}, and "exceeded": [subset/member]."""
    out: dict[str, Any] = {"max_auroc": ARTIFACT_MAX_AUROC, "cv_folds": CV_FOLDS, "subsets": {}, "exceeded": []}
    for subset, members in artifact_members().items():
        rows = sorted((s for s in test if s.subset == subset), key=lambda s: s.id)
        if len({s.pair_id for s in rows}) < CV_FOLDS:
            continue
        tr = sorted((s for s in train if s.subset == subset), key=lambda s: s.id)
        res = {}
        for m in members:
            texts, y, pids = [s.response for s in rows], [s.label for s in rows], [s.pair_id for s in rows]
            r = {"test_cv": _rates(rows, cross_validate(m, texts, y, pids, seed, CV_FOLDS))}
            if len({s.label for s in tr}) == 2:
                p, _, _ = fit_predict(m, [s.response for s in tr], [s.label for s in tr], texts, seed)
                r["train_fit"] = _rates(rows, p)
            res[m] = r
            worst = max(v["auroc"] for v in r.values())
            if worst > ARTIFACT_MAX_AUROC:
                out["exceeded"].append(f"{subset}/{m}")
                log.warning("%s: the %s baseline reaches AUROC %.2f (> %.2f): an artifact carries the label",
                            subset, m, worst, ARTIFACT_MAX_AUROC)
        out["subsets"][subset] = res
    return out


def manifest_entry(name: str, requested: dict[str, int], shipped: dict[str, int], train: Sequence[Sample],
                   test: Sequence[Sample], seed: int) -> dict[str, Any]:
    path = verdicts_path(name)
    raw = path.read_bytes()
    data = json.loads(raw)
    subsets = {}
    for s, v in data["subsets"].items():
        if s in requested:  # the subsets this build made
            subsets[s] = {**v, "test_pairs_requested": requested[s], "test_pairs_shipped": shipped.get(s)}
    return {"name": name, "verdicts_sha256": hashlib.sha256(raw).hexdigest(), "version": data["version"],
            "annotators": data["annotators"], "annotators_are": data.get("annotators_are", ""),
            "rounds": data.get("rounds", 1), "subsets": subsets,
            **({"screen": {k: v for k, v in data["screen"].items() if k != "rejected"}} if "screen" in data else {}),
            **({"earlier_screens": [{k: v for k, v in e.items() if k != "rejected"} for e in data["earlier_screens"]]}
               if "earlier_screens" in data else {}),
            "artifact_baselines": artifact_report(train, test, seed)}
