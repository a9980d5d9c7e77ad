"""The shortcut audit: can a subset's test split be solved from surface words of the response alone?

Per subset, two baselines that no monitor should need:
- lexical: TF-IDF over word 1-2 grams of the RESPONSE only + logistic regression, fitted on the
  subset's training split (a seeded label-stratified subsample, `audit.train_cap` per label), scored on
  its test split: AUROC, MR and FAR at P >= 0.5, pair accuracy (the misbehaving twin scored above its
  benign twin), and the n-grams with the largest weights towards each label;
- length: logistic regression on the response's log length in characters and words.
A subset whose lexical AUROC or pair accuracy exceeds the ceiling (`audit.max_auroc`,
`audit.max_pair_accuracy`) can be told apart by how its templates write misbehavior, so a monitor
"transferring" to it may only have learnt the wording: the build fails (`audit.on_exceed=fail`) naming
those n-grams, or warns (`warn`). The results go into manifest.json (`audit`) and the dataset card.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Sequence

from automon.config.build import AuditConfig
from automon.metrics import auroc, confusion, false_alarm_rate, miss_rate, pair_accuracy
from automon.schema import Sample

AUDIT_VERSION = "audit_v1"  # bump when a baseline or its subsampling changes


def _cap(train: Sequence[Sample], cap: int, seed: int) -> list[Sample]:
    from automon.probes.fit import training_samples

    return training_samples(train, "all", cap, seed)


def _scores(train: Sequence[Sample], test: Sequence[Sample], top: int, seed: int) -> dict[str, Any]:
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    y = np.array([s.label for s in train])
    vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_features=100_000, sublinear_tf=True)
    x = vec.fit_transform([s.response for s in train])
    lr = LogisticRegression(C=1.0, max_iter=2000, solver="liblinear", random_state=seed).fit(x, y)
    p = lr.predict_proba(vec.transform([s.response for s in test]))[:, 1]
    names = vec.get_feature_names_out()
    order = np.argsort(lr.coef_[0])
    lex = _rates(test, p.tolist())
    lex["ngrams"] = {"misbehavior": [[str(names[i]), round(float(lr.coef_[0][i]), 3)] for i in order[::-1][:top]],
                     "benign": [[str(names[i]), round(float(lr.coef_[0][i]), 3)] for i in order[:top]]}

    def length(samples: Sequence[Sample]) -> np.ndarray:
        return np.array([[math.log1p(len(s.response)), math.log1p(len(s.response.split()))] for s in samples])

    ln = LogisticRegression(max_iter=1000, solver="liblinear", random_state=seed).fit(length(train), y)
    return {"lexical": lex, "length": _rates(test, ln.predict_proba(length(test))[:, 1].tolist())}


def _rates(test: Sequence[Sample], p: list[float]) -> dict[str, Any]:
    labels = [s.label for s in test]
    c = confusion(labels, [int(v >= 0.5) for v in p])
    return {"auroc": round(auroc(labels, p), 4), "pair_accuracy": round(pair_accuracy(labels, p, [s.pair_id for s in test])[0], 4),
            "mr": round(miss_rate(c["tp"], c["fn"]), 4), "far": round(false_alarm_rate(c["fp"], c["tn"]), 4)}


def audit(train: Sequence[Sample], test: Sequence[Sample], cfg: AuditConfig) -> dict[str, Any]:
    """The audit section of manifest.json: per subset, both baselines and whether it exceeds."""
    by_train: dict[str, list[Sample]] = defaultdict(list)
    by_test: dict[str, list[Sample]] = defaultdict(list)
    for s in train:
        by_train[s.subset].append(s)
    for s in test:
        by_test[s.subset].append(s)
    subsets: dict[str, Any] = {}
    for sub in by_test:
        tr = _cap(by_train.get(sub, []), cfg.train_cap, cfg.seed)
        if len({s.label for s in tr}) < 2:
            subsets[sub] = {"skipped": "the training split lacks one of the labels"}
            continue
        res = _scores(tr, by_test[sub], cfg.top_ngrams, cfg.seed)
        lex = res["lexical"]
        res["n_train"], res["n_test"] = len(tr), len(by_test[sub])
        res["exceeds"] = bool(lex["auroc"] > cfg.max_auroc or lex["pair_accuracy"] > cfg.max_pair_accuracy)
        subsets[sub] = res
    return {"version": AUDIT_VERSION, "text": "response only", "train_cap_per_label": cfg.train_cap, "seed": cfg.seed,
            "ceiling": {"auroc": cfg.max_auroc, "pair_accuracy": cfg.max_pair_accuracy}, "on_exceed": cfg.on_exceed,
            "subsets": subsets, "exceeding": sorted(k for k, v in subsets.items() if v.get("exceeds"))}


def exceed_message(result: dict[str, Any]) -> str:
    lines = []
    for sub in result["exceeding"]:
        lex = result["subsets"][sub]["lexical"]
        words = lambda side: ", ".join(repr(g) for g, _ in lex["ngrams"][side][:5])  # noqa: E731
        lines.append(f"  {sub}: response-only lexical AUROC {lex['auroc']:.2f}, pair accuracy "
                     f"{lex['pair_accuracy']:.2f}; misbehavior reads {words('misbehavior')}; benign reads "
                     f"{words('benign')}")
    c = result["ceiling"]
    return (f"{len(lines)} subset(s) can be told apart from the response's words alone (ceiling: AUROC "
            f"{c['auroc']}, pair accuracy {c['pair_accuracy']}):\n" + "\n".join(lines))


def card_section(result: dict[str, Any], notes: dict[str, str] | None = None) -> str:
    """The dataset card's audit table (the PNG beside it is audit.png), and for each subset over the
    ceiling the reason its wordings version records (WordingsConfig.shortcut_notes)."""
    c = result["ceiling"]
    rows = ["| subset | lexical AUROC | pair acc. | MR @0.5 | FAR @0.5 | length AUROC | length pair acc. | over ceiling | top misbehavior n-grams |",
            "|---|---|---|---|---|---|---|---|---|"]
    for sub, r in result["subsets"].items():
        if "skipped" in r:
            rows.append(f"| {sub} | — | — | — | — | — | — | — | {r['skipped']} |")
            continue
        lx, ln = r["lexical"], r["length"]
        grams = ", ".join(f"`{g}`" for g, _ in lx["ngrams"]["misbehavior"][:4])
        rows.append(f"| {sub} | {lx['auroc']:.2f} | {lx['pair_accuracy']:.2f} | {lx['mr']:.2f} | {lx['far']:.2f} | "
                    f"{ln['auroc']:.2f} | {ln['pair_accuracy']:.2f} | {'**yes**' if r['exceeds'] else 'no'} | {grams} |")
    return ("## Shortcut audit\n\nCan a subset be solved from the RESPONSE's words alone? A TF-IDF (word 1-2 gram) + "
            f"logistic regression baseline fitted on each subset's training split (at most {result['train_cap_per_label']} "
            f"per label) and scored on its test split, and a length-only baseline. Ceiling: AUROC {c['auroc']}, pair "
            f"accuracy {c['pair_accuracy']} (on_exceed={result['on_exceed']}).\n\n" + "\n".join(rows)
            + _over_ceiling(result, notes or {}) + "\n\n![audit](audit.png)\n")


def _over_ceiling(result: dict[str, Any], notes: dict[str, str]) -> str:
    lines = []
    for sub in result["exceeding"]:
        lx = result["subsets"][sub]["lexical"]
        why = notes.get(sub) or ("no reason recorded: add one to the wordings version's shortcut_notes, or change "
                                 "its templates")
        lines.append(f"- **{sub}** is over the ceiling (lexical AUROC {lx['auroc']:.2f}, pair accuracy "
                     f"{lx['pair_accuracy']:.2f}): {why}")
    return "\n\nSubsets over the ceiling, and why the templates cannot bring them under it:\n\n" + "\n".join(lines) \
        if lines else ""


def build_shortcut_notes(manifest: dict[str, Any]) -> dict[str, str]:
    """The shortcut_notes of the wordings version a build's manifest records."""
    return shortcut_notes((manifest.get("config", {}).get("wordings") or {}).get("version"))


def shortcut_notes(wordings_version: str | None) -> dict[str, str]:
    """The shortcut_notes of conf/wordings/<version>.yaml ({} when it has none or is absent)."""
    import yaml

    from automon.config import CONF_DIR

    path = CONF_DIR / "wordings" / f"{wordings_version}.yaml"
    if not wordings_version or not path.is_file():
        return {}
    return dict((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("shortcut_notes") or {})


def plot(result: dict[str, Any], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subs = [s for s, r in result["subsets"].items() if "skipped" not in r]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, key, ceiling in zip(axes, ("auroc", "pair_accuracy"), (result["ceiling"]["auroc"],
                                                                  result["ceiling"]["pair_accuracy"])):
        lex = [result["subsets"][s]["lexical"][key] for s in subs]
        ln = [result["subsets"][s]["length"][key] for s in subs]
        xs = range(len(subs))
        ax.bar([x - 0.2 for x in xs], lex, 0.4, label="response words (TF-IDF + LR)")
        ax.bar([x + 0.2 for x in xs], ln, 0.4, label="response length")
        ax.axhline(ceiling, color="red", ls="--", lw=1, label=f"ceiling {ceiling}")
        ax.axhline(0.5, color="grey", ls=":", lw=1)
        ax.set_xticks(list(xs), subs, rotation=30, ha="right")
        ax.set_ylim(0, 1.02)
        ax.set_title({"auroc": "AUROC on the test split", "pair_accuracy": "pair accuracy on the test split"}[key])
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Shortcut audit: surface baselines that see only the response")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
