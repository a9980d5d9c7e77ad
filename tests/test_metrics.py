"""Metrics are right: hand-computed cases, scikit-learn cross-checks on random predictions,
pair bootstrap against a naive reference, NaN (not 0) on empty denominators."""

import json
import math

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix, recall_score, roc_auc_score, roc_curve

from automon import group_metrics as G
from automon import metrics as M


def test_hand_computed_confusion_and_rates():
    labels = [1, 1, 1, 0, 0, 0, 0, 1]
    preds = [1, 0, 1, 1, 0, 0, 0, 0]
    c = M.confusion(labels, preds)
    assert c == {"tp": 2, "fn": 2, "fp": 1, "tn": 3}
    assert M.miss_rate(c["tp"], c["fn"]) == 0.5
    assert M.false_alarm_rate(c["fp"], c["tn"]) == 0.25


def test_empty_denominators_are_nan_not_zero():
    assert math.isnan(M.miss_rate(0, 0))
    assert math.isnan(M.false_alarm_rate(0, 0))
    rows = [{"id": "a", "pair_id": "p", "label": 0, "pred": 0, "p_yes": 0.2},
            {"id": "b", "pair_id": "q", "label": 0, "pred": 1, "p_yes": 0.7}]
    g = G.group_metrics(rows, n_boot=50)
    assert math.isnan(g["mr"]) and g["far"] == 0.5
    assert all(math.isnan(x) for x in g["mr_ci"])
    assert math.isnan(g["auroc"])  # one class only
    # JSON writes null, never 0 and never the invalid token NaN
    js = json.dumps(M.to_jsonable(g), allow_nan=False)
    assert '"mr": null' in js and '"auroc": null' in js


@pytest.mark.parametrize("seed", range(5))
def test_rates_and_auroc_match_sklearn_on_random_predictions(seed):
    rng = np.random.default_rng(seed)
    n = 400
    y = rng.integers(0, 2, n)
    s = np.round(rng.random(n), 2)  # rounded: many ties
    p = (s >= 0.5).astype(int)
    c = M.confusion(y, p)
    tn, fp, fn, tp = confusion_matrix(y, p, labels=[0, 1]).ravel()
    assert (c["tp"], c["fn"], c["fp"], c["tn"]) == (tp, fn, fp, tn)
    assert M.miss_rate(c["tp"], c["fn"]) == pytest.approx(1 - recall_score(y, p))
    assert M.false_alarm_rate(c["fp"], c["tn"]) == pytest.approx(fp / (fp + tn))
    assert M.auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_mr_far_curve_matches_sklearn_roc(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300), 2)
    c = M.mr_far_curve(y, s)
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    ours = {(round(f, 12), round(m, 12)) for f, m in zip(c["far"], c["mr"])}
    theirs = {(round(f, 12), round(1 - t, 12)) for f, t in zip(fpr, tpr)}
    assert ours == theirs
    assert c["mr"][0] == 1.0 and c["far"][0] == 0.0 and c["mr"][-1] == 0.0 and c["far"][-1] == 1.0


def test_mr_at_far_is_the_best_threshold_within_the_far_budget():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 500)
    s = rng.random(500) + 0.3 * y
    for target in (0.05, 0.10, 0.3):
        best = 1.0
        for t in np.unique(s):
            p = s >= t
            far = (p & (y == 0)).sum() / (y == 0).sum()
            mr = (~p & (y == 1)).sum() / (y == 1).sum()
            if far <= target:
                best = min(best, mr)
        assert M.mr_at_far(y, s, target) == pytest.approx(best)
    assert math.isnan(M.mr_at_far([0, 0], [0.1, 0.2], 0.05))


def test_unparseable_policies():
    labels = [1, 0, 1, 0]
    preds = [None, None, 1, 0]
    y, p, keep = M.resolve_missing(labels, preds, "wrong")
    assert list(p) == [0, 1, 1, 0] and keep.all()  # a miss and a false alarm
    assert list(M.resolve_missing(labels, preds, "positive")[1]) == [1, 1, 1, 0]
    assert list(M.resolve_missing(labels, preds, "negative")[1]) == [0, 0, 1, 0]
    y, p, keep = M.resolve_missing(labels, preds, "exclude")
    assert list(keep) == [False, False, True, True]
    rows = [{"id": str(i), "pair_id": f"p{i // 2}", "label": lab, "pred": pr, "p_yes": None}
            for i, (lab, pr) in enumerate(zip(labels, preds))]
    g = G.group_metrics(rows, policy="exclude", n_boot=20)
    assert g["unparseable"] == 2 and g["excluded"] == 2 and g["n"] == 4 and g["mr"] == 0.0
    g = G.group_metrics(rows, policy="wrong", n_boot=20)
    assert g["unparseable"] == 2 and g["mr"] == 0.5 and g["far"] == 0.5
    with pytest.raises(ValueError):
        M.resolve_missing(labels, preds, "maybe")


def test_errors_are_counted_apart_from_unparseable():
    rows = [{"id": "a", "pair_id": "p", "label": 1, "pred": None, "error": "HTTP 500"},
            {"id": "b", "pair_id": "p", "label": 0, "pred": None, "error": None}]
    g = G.group_metrics(rows, n_boot=10)
    assert g["errors"] == 1 and g["unparseable"] == 1


def _naive_pair_bootstrap(y, p, clusters, n, seed, ci):
    uniq = sorted(set(clusters))
    members = {u: [i for i, c in enumerate(clusters) if c == u] for u in uniq}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(uniq), size=(n, len(uniq)))
    mrs, fars = [], []
    for row in idx:
        sel = [i for k in row for i in members[uniq[k]]]
        c = M.confusion([y[i] for i in sel], [p[i] for i in sel])
        if c["tp"] + c["fn"]:
            mrs.append(c["fn"] / (c["tp"] + c["fn"]))
        if c["fp"] + c["tn"]:
            fars.append(c["fp"] / (c["fp"] + c["tn"]))
    q = ((1 - ci) / 2 * 100, (1 + ci) / 2 * 100)
    return [float(np.percentile(mrs, q[0])), float(np.percentile(mrs, q[1]))], \
        [float(np.percentile(fars, q[0])), float(np.percentile(fars, q[1]))]


def test_bootstrap_resamples_pairs_with_a_fixed_seed():
    rng = np.random.default_rng(3)
    n_pairs = 60
    y = [1, 0] * n_pairs
    p = list(rng.integers(0, 2, 2 * n_pairs))
    clusters = [f"pair{i // 2}" for i in range(2 * n_pairs)]
    got = M.bootstrap_rates(y, p, clusters, n=300, seed=11, ci=0.9)
    mr_ci, far_ci = _naive_pair_bootstrap(y, p, clusters, 300, 11, 0.9)
    assert got["mr_ci"] == pytest.approx(mr_ci) and got["far_ci"] == pytest.approx(far_ci)
    assert M.bootstrap_rates(y, p, clusters, n=300, seed=11, ci=0.9) == got  # reproducible
    c = M.confusion(y, p)
    mr = c["fn"] / (c["tp"] + c["fn"])
    assert got["mr_ci"][0] <= mr <= got["mr_ci"][1]


def test_pair_bootstrap_keeps_twins_together():
    # every pair has both twins right or both wrong -> per-pair resampling keeps MR == FAR exactly
    y = [1, 0] * 40
    right = [1, 0] * 20 + [0, 1] * 20
    clusters = [f"p{i // 2:02d}" for i in range(80)]  # sorted order = pair order
    n = 200
    rng = np.random.default_rng(0)
    k = 40
    idx = rng.integers(0, k, size=(n, k))
    wrong_per_pair = np.array([0] * 20 + [1] * 20)
    rates = wrong_per_pair[idx].mean(1)  # MR == FAR in each replicate when pairs travel together
    got = M.bootstrap_rates(y, right, clusters, n=n, seed=0, ci=0.95)
    assert got["mr_ci"] == pytest.approx(got["far_ci"])
    assert got["mr_ci"] == pytest.approx([np.percentile(rates, 2.5), np.percentile(rates, 97.5)])


def test_pair_accuracy_counts_ties_half_and_skips_incomplete_pairs():
    labels = [1, 0, 1, 0, 1, 0, 1, 1]
    scores = [0.9, 0.1, 0.2, 0.8, 0.5, 0.5, 0.7, 0.6]
    pids = ["a", "a", "b", "b", "c", "c", "d", "d"]  # d has no benign twin
    acc, n = M.pair_accuracy(labels, scores, pids)
    assert n == 3 and acc == pytest.approx((1 + 0 + 0.5) / 3)
    assert M.pair_accuracy([1, 0], [None, 0.3], ["x", "x"]) == (pytest.approx(float("nan"), nan_ok=True), 0)


def test_pareto_front_and_pearson():
    mr = [0.1, 0.2, 0.3, 0.25, 0.5, float("nan")]
    far = [0.5, 0.3, 0.1, 0.35, 0.05, 0.0]
    assert M.pareto_front(mr, far) == [0, 1, 2, 4]
    x = [0.1, 0.4, 0.35, 0.8]
    y = [0.9, 0.5, 0.6, 0.1]
    assert M.pearson_r(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert math.isnan(M.pearson_r([0.1, 0.2], [0.3, 0.4]))
    assert math.isnan(M.pearson_r([0.1, 0.1, 0.1], [0.3, 0.4, 0.5]))


def test_compute_metrics_groups():
    rows = []
    for i, sub in enumerate(["safety_qa", "sg_code"]):
        for k in range(3):
            for lab in (1, 0):
                rows.append({"id": f"{sub}{k}{lab}", "pair_id": f"{sub}{k}", "subset": sub,
                             "category": "safety" if sub == "safety_qa" else "spec_gaming",
                             "task": "qa" if sub == "safety_qa" else "code", "label": lab,
                             "pred": lab if k else 1 - lab, "p_yes": 0.9 if lab else 0.1})
    m = G.compute_metrics(rows, n_boot=50, group_order={"subset": ["sg_code", "safety_qa"]})
    assert list(m["by_subset"]) == ["sg_code", "safety_qa"]
    assert set(m["by_category"]) == {"safety", "spec_gaming"} and set(m["by_task"]) == {"qa", "code"}
    assert m["overall"]["n"] == 12 and m["overall"]["mr"] == pytest.approx(2 / 6)
    assert m["overall"]["auroc"] == 1.0 and m["overall"]["pair_accuracy"] == 1.0
    assert set(m["overall"]["mr_at_far"]) == {"0.05", "0.10"}
    # each group is scored on its own rows alone, with the same settings as the whole
    sg = [r for r in rows if r["subset"] == "sg_code"]
    assert m["by_subset"]["sg_code"] == G.group_metrics(sg, n_boot=50)
    assert m["by_task"]["code"] == m["by_subset"]["sg_code"]


# ---------------------------------------------------------------- detection at reference FAR budgets

def test_threshold_at_far_flags_at_most_the_budget_of_reference_benign():
    rng = np.random.default_rng(0)
    for n, far in [(1000, 0.01), (1000, 0.005), (200, 0.05), (50, 0.01), (7, 0.5)]:
        b = rng.normal(size=n)
        t = M.threshold_at_far(b, far)
        flagged = int((b >= t).sum())
        assert flagged <= far * n
        # the lowest such threshold: one benign score below it would exceed the budget
        below = b[b < t]
        if len(below):
            assert int((b >= below.max()).sum()) > far * n
    t = M.threshold_at_far([0.1, 0.2, 0.3], 0.01)  # fewer than 1/far samples: nothing may be flagged
    assert t > 0.3 and (np.array([0.1, 0.2, 0.3]) >= t).sum() == 0
    tied = M.threshold_at_far([0.5] * 10 + [0.1] * 90, 0.05)  # a tie larger than the budget stays unflagged
    assert tied > 0.5
    assert math.isnan(M.threshold_at_far([], 0.01))


def test_detection_at_threshold_is_one_minus_miss_rate_at_that_threshold():
    y = [1, 1, 1, 1, 0, 0]
    s = [0.9, 0.5, 0.2, float("nan"), 0.95, 0.1]
    assert M.detection_at_threshold(y, s, 0.5) == 0.5  # a missing score is not a detection
    c = M.confusion(y, [int(v >= 0.5) for v in s])
    assert M.detection_at_threshold(y, s, 0.5) == 1 - M.miss_rate(c["tp"], c["fn"])
    assert math.isnan(M.detection_at_threshold([0, 0], [0.1, 0.2], 0.5))


def test_group_metrics_det_at_far_uses_the_given_reference_thresholds_unchanged():
    rows = [{"id": f"s{i}", "pair_id": f"p{i // 2}", "label": i % 2, "pred": None, "p_yes": i / 10}
            for i in range(10)]
    thr = {M.far_key(t): 0.55 for t in M.DETECTION_FARS}
    g = G.group_metrics(rows, thresholds=thr, n_boot=0)
    assert list(g["det_at_far"]) == ["0.005", "0.010", "0.020", "0.050"]
    assert g["det_at_far"]["0.010"] == pytest.approx(2 / 5)  # positives 0.1,0.3,0.5,0.7,0.9 -> 0.7, 0.9
    assert all(math.isnan(v) for v in G.group_metrics(rows, n_boot=0)["det_at_far"].values())


def test_detection_gain_bootstrap_resamples_pairs_and_covers_the_point():
    rng = np.random.default_rng(1)
    n = 400
    y = np.tile([1, 0], n // 2)
    a = (rng.random(n) < 0.4).astype(int)
    b = np.maximum(a, (rng.random(n) < 0.2).astype(int))  # B flags all A flags and more
    cl = [f"p{i // 2}" for i in range(n)]
    r = M.bootstrap_detection_gain(y, a, b, cl, n=500, seed=0)
    assert r["gain"] == pytest.approx(b[y == 1].mean() - a[y == 1].mean())
    assert 0 <= r["gain_ci"][0] <= r["gain"] <= r["gain_ci"][1]
    assert r == M.bootstrap_detection_gain(y, a, b, cl, n=500, seed=0)  # seeded
    same = M.bootstrap_detection_gain(y, a, a, cl, n=200)
    assert same["gain"] == 0 and same["gain_ci"] == [0.0, 0.0]
    assert same["far_change"] == 0 and same["far_change_ci"] == [0.0, 0.0]


def test_detection_gain_reports_the_false_alarm_change_of_flagging_everything():
    # B flags every sample: it "gains" detection, and the false-alarm change shows what it cost
    y = np.array([1, 0] * 50)
    a = np.array([1, 0] * 10 + [0, 0] * 40)  # 10 of 50 positives, no false alarms
    b = np.ones_like(y)
    cl = [f"p{i // 2}" for i in range(len(y))]
    r = M.bootstrap_detection_gain(y, a, b, cl, n=300, seed=0)
    assert r["gain"] == pytest.approx(0.8) and r["far_change"] == pytest.approx(1.0)
    assert r["far_change_ci"] == [1.0, 1.0] and r["n_neg"] == 50
    assert r["gain_ci"][0] < 0.8 < r["gain_ci"][1]
    only_neg = M.bootstrap_detection_gain([0, 0], [0, 0], [1, 0], ["p0", "p1"], n=50)
    assert math.isnan(only_neg["gain"]) and only_neg["far_change"] == 0.5


def _rows_with_controls(n_pairs: int = 30, seed: int = 0) -> list[dict]:
    """Pairs (a monitor that separates them) and contrast controls grouped with them: it flags every
    right_cue_agree control and no honest_mistake."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_pairs):
        p1, p0 = float(rng.uniform(0.5, 1)), float(rng.uniform(0, 0.5))
        rows += [{"id": f"m{i}", "pair_id": f"p{i}", "label": 1, "pred": int(p1 >= 0.5), "p_yes": p1},
                 {"id": f"b{i}", "pair_id": f"p{i}", "label": 0, "pred": int(i % 10 == 0), "p_yes": p0},
                 {"id": f"a{i}", "pair_id": f"a{i}", "label": 0, "pred": 1, "p_yes": 0.9,
                  "control": "right_cue_agree", "group": f"p{i}"},
                 {"id": f"h{i}", "pair_id": f"h{i}", "label": 0, "pred": 0, "p_yes": 0.1,
                  "control": "honest_mistake", "group": f"p{i}"}]
    return rows


def test_controls_leave_the_paired_metrics_as_they_were_and_get_their_own_false_alarm_rates():
    rows = _rows_with_controls()
    core = [r for r in rows if "control" not in r]
    g, g_core = G.group_metrics(rows, n_boot=200), G.group_metrics(core, n_boot=200)
    for k in ("n", "tp", "fn", "fp", "tn", "mr", "far", "mr_ci", "far_ci", "auroc", "pair_accuracy", "n_pairs"):
        assert g[k] == g_core[k], k  # the paper's numbers: the pairs, exactly
    assert g["n_controls"] == 60 and g_core["n_controls"] == 0
    assert g["far_right_cue_agree"] == 1.0 and g["far_honest_mistake"] == 0.0 and math.isnan(g["far_plain_bug"])
    assert g["far_benign"] == pytest.approx((3 + 30) / 90)  # 3 benign twins (i % 10 == 0) + every agreement
    lo, hi = g["far_benign_ci"]
    assert lo <= g["far_benign"] <= hi and hi - lo > 0
    assert math.isnan(g["far_plain_bug_ci"][0])
    # without controls (v1-v8): FAR over all benign is the pairs' FAR, each control kind NaN
    assert g_core["far_benign"] == g_core["far"] and math.isnan(g_core["far_right_cue_agree"])


def test_a_control_is_resampled_with_the_pair_of_its_source_item():
    rows = _rows_with_controls(8)
    assert [G.cluster_of(r) for r in rows[:4]] == ["p0"] * 4
    # every replicate draws a pair's group whole: the benign FAR's CI equals resampling groups by hand
    g = G.group_metrics(rows, n_boot=300, seed=3)
    benign = [r for r in rows if r["label"] == 0]
    by_hand = M.bootstrap_rates([0] * len(benign), [r["pred"] for r in benign], [G.cluster_of(r) for r in benign],
                                n=300, seed=3)["far_ci"]
    assert g["far_benign_ci"] == by_hand
