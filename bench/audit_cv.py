"""An independent shortcut check of a build's test split: response-only classifiers scored by 5-fold
cross-validation on the test pairs themselves (folds keep twins together), per subset.

    python bench/audit_cv.py data/builds/local sg_code sg_qa safety_code

Unlike the build's audit (fitted on the training split), this asks whether the test split carries
its label in its own wording: word 1-2 gram TF-IDF, character 3-5 gram TF-IDF within word
boundaries, character 1-4 grams, each + logistic regression. Prints AUROC and pair accuracy (the
misbehaving twin scored above its benign twin, a tie counting 1/2 as in automon.metrics); where samples name a gaming family (sg_code's `meta.family`), the same held-out
scores per family too. docs/data.md quotes its output for the local builds.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold

VECTORIZERS = {
    "word 1-2": lambda: TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
    "char_wb 3-5": lambda: TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), min_df=2, sublinear_tf=True,
                                           max_features=200_000),
    "char 1-4": lambda: TfidfVectorizer(analyzer="char", ngram_range=(1, 4), min_df=2, sublinear_tf=True,
                                        max_features=200_000),
}


def _win(pair: dict[int, float]) -> float:
    """The misbehaving twin scored above its benign twin: 1; a tie (twins with the same features): 1/2,
    as automon.metrics.pair_accuracy counts it."""
    return 1.0 if pair[1] > pair[0] else 0.5 if pair[1] == pair[0] else 0.0


def main(build: str, subsets: list[str]) -> None:
    samples = [json.loads(line) for line in open(f"{build}/test.jsonl")]
    for subset in subsets:
        rows = [s for s in samples if s["subset"] == subset]
        texts, y, groups = [s["response"] for s in rows], np.array([s["label"] for s in rows]), [s["pair_id"] for s in rows]
        for name, make in VECTORIZERS.items():
            p = np.zeros(len(rows))
            for fit, held in GroupKFold(5).split(texts, y, groups):
                vec = make()
                lr = LogisticRegression(C=4, max_iter=2000).fit(vec.fit_transform([texts[i] for i in fit]), y[fit])
                p[held] = lr.predict_proba(vec.transform([texts[i] for i in held]))[:, 1]
            pairs: dict[str, dict[int, float]] = {}
            for i, g in enumerate(groups):
                pairs.setdefault(g, {})[int(y[i])] = p[i]
            acc = np.mean([_win(d) for d in pairs.values() if len(d) == 2])
            print(f"{subset:15s} {name:12s} AUROC {roc_auc_score(y, p):.3f}  pair accuracy {acc:.3f}  (n={len(rows)})")
            families = sorted({s["meta"].get("family") for s in rows} - {None})
            for fam in families:  # sg_code since its v3 templates: the same held-out scores, per gaming family
                idx = [i for i, s in enumerate(rows) if s["meta"].get("family") == fam]
                fam_pairs = [pairs[g] for g in dict.fromkeys(groups[i] for i in idx) if len(pairs[g]) == 2]
                fam_acc = np.mean([_win(d) for d in fam_pairs])
                print(f"{'':15s} {name:12s}   {fam:10s} AUROC {roc_auc_score(y[idx], p[idx]):.3f}  "
                      f"pair accuracy {fam_acc:.3f}  (n={len(idx)})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
