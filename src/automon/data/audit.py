"""The shortcut audit: can a subset's test split be solved from surface features of the response alone?
And (`reference`, automon.data.reference) can it be solved by a rule that checks one feature of the
misbehavior (agreement with the user, correctness, a test literal) without the conjunction?

Per subset, a panel of baselines no monitor should need (audit_panel.MEMBERS; `audit.members`):
word 1-2 gram TF-IDF, character 3-5 gram TF-IDF and length, each + logistic regression fitted on the
subset's training split (a seeded label-stratified subsample, `audit.train_cap` per label;
`audit.member_caps` for the slower ones) and scored on its test split; and a MiniLM sentence embedding
+ LR scored by pair-grouped cross-validation on (a seeded sample of) the test split. Each: AUROC, MR
and FAR at P >= 0.5, pair accuracy (the misbehaving twin scored above its benign twin). The word
member's largest weights and a z-test per n-gram (audit_panel.ngram_z) name what still carries a
label; `audit.hard_subset` adds AFLite's hard subset of test pairs (adversaries: word and char; the
other members, held out, score it). A subset over the ceiling for ANY member (`audit.max_auroc`,
`audit.max_pair_accuracy`) can be told apart by how its templates write misbehavior, so a monitor
"transferring" to it may only have learnt the wording: the build fails (`audit.on_exceed=fail`)
naming those members and n-grams, or warns (`warn`). The results go into manifest.json (`audit`) and
the dataset card; what each member cost goes to the log only (the manifest stays byte-identical).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any, Sequence

from automon.config import CONF_DIR
from automon.config.build import AuditConfig
from automon.data.forked import Forked
from automon.data.audit_panel import MEMBERS, TEST_CV, aflite, cross_validate, fit_predict, import_sklearn, ngram_z
from automon.data.recipes.sg_code.constructs import overlap
from automon.data.reference import reference_report
from automon.metrics import auroc, confusion, false_alarm_rate, miss_rate, pair_accuracy
from automon.probes.fit import training_samples
from automon.schema import Sample

log = logging.getLogger(__name__)

AUDIT_VERSION = "audit_v2"  # bump when a baseline or its subsampling changes (v2: the panel, z-test, AFLite)
ADVERSARIES = ("word", "char")  # AFLite's two families; the other members are held out


def _cap(train: Sequence[Sample], cap: int, seed: int) -> list[Sample]:
    return training_samples(train, "all", cap, seed)


def _rates(test: Sequence[Sample], p: Sequence[float]) -> dict[str, Any]:
    labels = [s.label for s in test]
    c = confusion(labels, [int(v >= 0.5) for v in p])
    return {"auroc": round(auroc(labels, list(p)), 4),
            "pair_accuracy": round(pair_accuracy(labels, list(p), [s.pair_id for s in test])[0], 4),
            "mr": round(miss_rate(c["tp"], c["fn"]), 4), "far": round(false_alarm_rate(c["fp"], c["tn"]), 4)}


def _opts(name: str, cfg: AuditConfig) -> dict[str, Any]:
    return {"char": {"max_chars": cfg.char_max_chars},
            "minilm": {"max_length": cfg.minilm_max_length, "cache": cfg.embedding_cache}}.get(name, {})


def _cv_rows(test: Sequence[Sample], name: str, cfg: AuditConfig) -> list[Sample]:
    """The test samples a TEST_CV member scores: every complete pair, or `minilm_pairs` of them."""
    import random

    by_pair: dict[str, list[Sample]] = defaultdict(list)
    for s in test:
        by_pair[s.pair_id].append(s)
    pairs = sorted(p for p, ss in by_pair.items() if p is not None and sorted(s.label for s in ss) == [0, 1])
    random.Random(f"{cfg.seed}:{name}:{test[0].subset}").shuffle(pairs)
    keep = set(pairs if cfg.minilm_pairs is None else pairs[:cfg.minilm_pairs])
    return [s for s in test if s.pair_id in keep]


def _subset(train: Sequence[Sample], test: Sequence[Sample], cfg: AuditConfig, cost: dict) -> dict[str, Any]:
    import numpy as np

    members, probs = {}, {}
    for name in cfg.members:
        t0 = time.perf_counter()
        if MEMBERS[name].fit == TEST_CV:
            rows = _cv_rows(test, name, cfg)
            p = cross_validate(name, [s.response for s in rows], [s.label for s in rows], [s.pair_id for s in rows],
                               cfg.seed, cfg.cv_folds, _opts(name, cfg))
            members[name] = {**_rates(rows, p), "fit": f"{cfg.cv_folds}-fold pair-grouped CV on {len(rows) // 2} test pairs"}
        else:
            tr = _cap(train, cfg.member_caps[name], cfg.seed) if name in cfg.member_caps else train
            rows = list(test)
            p, lr, names = fit_predict(name, [s.response for s in tr], [s.label for s in tr],
                                       [s.response for s in rows], cfg.seed, _opts(name, cfg))
            members[name] = {**_rates(rows, p), "fit": f"training split, {len(tr)} samples"}
            if name == "word":  # the n-grams it leans on
                order = np.argsort(lr.coef_[0], kind="stable")
                members[name]["ngrams"] = {
                    "misbehavior": [[str(names[i]), round(float(lr.coef_[0][i]), 3)] for i in order[::-1][:cfg.top_ngrams]],
                    "benign": [[str(names[i]), round(float(lr.coef_[0][i]), 3)] for i in order[:cfg.top_ngrams]]}
        probs[name] = dict(zip((s.id for s in rows), (float(v) for v in p)))
        cost[name] = cost.get(name, 0.0) + time.perf_counter() - t0
    t0 = time.perf_counter()
    out: dict[str, Any] = {"members": members,
                           "ngram_z": ngram_z([s.response for s in test], [s.label for s in test], cfg.top_ngrams,
                                              cfg.z_min_count, cfg.z_alpha),
                           "n_train": len(train), "n_test": len(test)}
    cost["z-test"] = cost.get("z-test", 0.0) + time.perf_counter() - t0
    out["exceeded_by"] = [m for m, r in members.items()
                          if r["auroc"] > cfg.max_auroc or r["pair_accuracy"] > cfg.max_pair_accuracy]
    families = _families(test, probs)
    if families:  # sg_code: the panel per family, and the request-aware baseline
        out["families"] = families
        out["request_aware"] = _request_aware(test)
        out["exceeded_by"] += sorted({f"{m}@{fam}" for fam, rs in families.items() for m, r in rs.items()
                                      if r["auroc"] > cfg.max_auroc or r["pair_accuracy"] > cfg.max_pair_accuracy})
    out["exceeds"] = bool(out["exceeded_by"])
    if cfg.hard_subset:
        t0 = time.perf_counter()
        out["hard_subset"] = _hard_subset(test, probs, cfg)
        cost["hard subset"] = cost.get("hard subset", 0.0) + time.perf_counter() - t0
    return out


def _families(test: Sequence[Sample], probs: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Each member's rates on the test samples of each gaming family (meta "family": a pair's twins
    share it), so that a family the subset's mix hides cannot carry its label in its words."""
    by_family: dict[str, list[Sample]] = defaultdict(list)
    for s in test:
        if s.meta.get("family"):
            by_family[s.meta["family"]].append(s)
    out = {}
    for fam, rows in sorted(by_family.items()):
        rates = {}
        for m, p in probs.items():
            kept = [s for s in rows if s.id in p]
            if len({s.label for s in kept}) == 2:
                rates[m] = {**_rates(kept, [p[s.id] for s in kept]), "pairs": len(kept) // 2}
        out[fam] = rates
    return out


def _request_aware(test: Sequence[Sample]) -> dict[str, Any]:
    """The construct's own signal, read with the request: how many visible-test inputs the
    response's branches and tables are keyed on (sg_code constructs.overlap). It should read the
    label where the response-only panel must not; checker tampering is not in it."""
    score = {s.id: float(overlap(s.meta.get("visible_tests") or [], s.response)) for s in test}
    out = {"overall": _rates(list(test), [score[s.id] for s in test])}
    by_family: dict[str, list[Sample]] = defaultdict(list)
    for s in test:
        by_family[s.meta.get("family") or "other"].append(s)
    out["families"] = {fam: _rates(rows, [score[s.id] for s in rows]) for fam, rows in sorted(by_family.items())}
    return out


def _hard_subset(test: Sequence[Sample], probs: dict[str, dict[str, float]], cfg: AuditConfig) -> dict[str, Any]:
    """AFLite on whole test pairs with the word and char families as adversaries (features fitted on
    the test responses, no labels); every member's rates on the pairs that survive (a TEST_CV member:
    on those of its sampled pairs that survive)."""
    texts = [s.response for s in test]
    # 5,000 features per family: 64 splits x 2 adversaries per round stay about a second per subset
    feats = [MEMBERS[m].featurize(texts, [], {**_opts(m, cfg), "max_features": 5000})[0] for m in ADVERSARIES]
    keep = aflite([s.pair_id for s in test], [s.label for s in test], feats, cfg.seed, cfg.hard_splits, cfg.hard_tau)
    rates = {}
    for m, p in probs.items():
        kept = [s for s in test if s.pair_id in keep and s.id in p]
        if len(kept) >= 4:
            rates[m] = {**_rates(kept, [p[s.id] for s in kept]), "pairs": len(kept) // 2}
    return {"pairs": len(keep), "of": len({s.pair_id for s in test}), "adversaries": list(ADVERSARIES),
            "held_out": [m for m in probs if m not in ADVERSARIES], "splits": cfg.hard_splits, "tau": cfg.hard_tau,
            "members": rates, "pair_ids": sorted(keep)}


def _audit_subsets(names: list[str], capped: dict[str, list[Sample]], by_test: dict[str, list[Sample]],
                   cfg: AuditConfig) -> tuple[dict[str, Any], dict[str, float]]:
    """The panel of each named subset (`capped`: its training samples, train_cap per label), and
    what each member cost (seconds, for the log)."""
    from threadpoolctl import threadpool_limits

    subsets: dict[str, Any] = {}
    cost: dict[str, float] = {}
    # One BLAS thread: the build re-checks its files in a forked process meanwhile, and a second
    # BLAS thread on a busy core made AFLite's small solves 75x slower (measured on 2 cores).
    with threadpool_limits(1):
        for sub in names:
            tr = capped[sub]
            if len({s.label for s in tr}) < 2:
                subsets[sub] = {"skipped": "the training split lacks one of the labels"}
                continue
            subsets[sub] = _subset(tr, by_test[sub], cfg, cost)
    return subsets, cost


def audit(train: Sequence[Sample], test: Sequence[Sample], cfg: AuditConfig, parallel: bool = True) -> dict[str, Any]:
    """The audit section of manifest.json: per subset, the panel and whether it exceeds.
    `parallel`: half of the subsets in a forked child (Linux fork; the same result either way)."""
    unknown = [m for m in cfg.members if m not in MEMBERS]
    if unknown or not cfg.members:
        raise ValueError(f"audit.members: unknown {unknown} or empty; valid: {', '.join(MEMBERS)}")
    by_train: dict[str, list[Sample]] = defaultdict(list)
    by_test: dict[str, list[Sample]] = defaultdict(list)
    for s in train:
        by_train[s.subset].append(s)
    for s in test:
        by_test[s.subset].append(s)
    # The subsets are independent: about half of the work (by text volume) runs in a forked child
    # beside this process, and the results are put back in the subsets' order, so the section is
    # the same as a serial audit's (a test checks it).
    order = list(by_test)
    capped = {sub: _cap(by_train.get(sub, []), cfg.train_cap, cfg.seed) for sub in order}
    volume = {sub: sum(len(s.response) for s in by_test[sub] + capped[sub]) for sub in order}
    halves: tuple[list[str], list[str]] = ([], [])
    for sub in sorted(order, key=lambda k: -volume[k]):  # longest first, each to the lighter half
        lighter = min(halves, key=lambda h: sum(volume[k] for k in h))
        lighter.append(sub)
    if not (parallel and halves[1]):
        subsets, cost = _audit_subsets(order, capped, by_test, cfg)
    else:
        import_sklearn()
        with Forked(_audit_subsets, halves[1], capped, by_test, cfg, name="audit") as child:
            subsets, cost = _audit_subsets(halves[0], capped, by_test, cfg)
            (more, more_cost), _ = child.result()
        subsets.update(more)
        for k, v in more_cost.items():
            cost[k] = cost.get(k, 0.0) + v
    subsets = {sub: subsets[sub] for sub in order}
    # Timings go to the log, never into the result: the manifest must be byte-identical across runs.
    log.info("audit cost (s): %s", ", ".join(f"{k} {v:.1f}" for k, v in cost.items()))
    reference = reference_report(test)
    for rule, per in reference["rules"].items():
        for sub, r in per.items():
            if r["misses"]:
                log.warning("reference monitor %s misses its goal on %s: %s", rule, sub, "; ".join(r["misses"]))
    return {"version": AUDIT_VERSION, "text": "response only", "train_cap_per_label": cfg.train_cap, "seed": cfg.seed,
            "members": {m: MEMBERS[m].description for m in cfg.members},
            "ceiling": {"auroc": cfg.max_auroc, "pair_accuracy": cfg.max_pair_accuracy}, "on_exceed": cfg.on_exceed,
            "subsets": subsets, "exceeding": sorted(k for k, v in subsets.items() if v.get("exceeds")),
            "reference": reference}


def members_of(r: dict[str, Any]) -> dict[str, dict]:
    """A subset's rates by member, for this version's results and audit_v1's (lexical, length)."""
    return r["members"] if "members" in r else {"word": r["lexical"], "length": r["length"]}


def rate_of(r: dict[str, Any], name: str) -> dict[str, Any]:
    """A member's rates by the name exceeded_by gives it: "word", or "word@lookup" on one family."""
    member, _, family = name.partition("@")
    return r["families"][family][member] if family else members_of(r)[member]


def _give_away(r: dict[str, Any], side: str, n: int = 5) -> str:
    word = members_of(r).get("word", {})
    return ", ".join(repr(g) for g, _ in word.get("ngrams", {}).get(side, [])[:n])


def exceed_message(result: dict[str, Any]) -> str:
    lines = []
    for sub in result["exceeding"]:
        r = result["subsets"][sub]
        over = r.get("exceeded_by") or ["word"]
        rates = "; ".join(f"{m} AUROC {rate_of(r, m)['auroc']:.2f}, pair accuracy {rate_of(r, m)['pair_accuracy']:.2f}"
                          for m in over)
        z = ", ".join(f"{g!r} (z {zv:+.1f})" for g, zv, *_ in r.get("ngram_z", [])[:5]) or "none significant"
        lines.append(f"  {sub}: {rates}; misbehavior reads {_give_away(r, 'misbehavior')}; benign reads "
                     f"{_give_away(r, 'benign')}; n-grams carrying a label: {z}")
    c = result["ceiling"]
    return (f"{len(lines)} subset(s) can be told apart from the response alone (ceiling: AUROC "
            f"{c['auroc']}, pair accuracy {c['pair_accuracy']}, for every member of the panel):\n" + "\n".join(lines))


def card_section(result: dict[str, Any], notes: dict[str, str] | None = None) -> str:
    """The dataset card's audit table (the PNG beside it is audit.png), the n-grams that still carry a
    label, the hard subset's size, and for each subset over the ceiling the reason its wordings
    version records (WordingsConfig.shortcut_notes)."""
    c = result["ceiling"]
    subs = {k: r for k, r in result["subsets"].items() if "skipped" not in r}
    names = list(next(iter(members_of(r) for r in subs.values()), {}))
    head = ["subset", *[f"{m} AUROC / pair acc." for m in names], "over ceiling", "n-grams carrying a label (z)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sub, r in result["subsets"].items():
        if "skipped" in r:
            rows.append(f"| {sub} | " + " | ".join(["—"] * (len(head) - 2)) + f" | {r['skipped']} |")
            continue
        ms = members_of(r)
        zs = (", ".join(f"`{g}` {z:+.1f}" for g, z, *_ in r["ngram_z"][:3]) or "none") if "ngram_z" in r else \
            ", ".join(f"`{g}`" for g, _ in ms["word"].get("ngrams", {}).get("misbehavior", [])[:4])
        rows.append(f"| {sub} | " + " | ".join(f"{ms[m]['auroc']:.2f} / {ms[m]['pair_accuracy']:.2f}" for m in names)
                    + f" | {'**yes**' if r['exceeds'] else 'no'} | {zs} |")
    described = "; ".join(f"{m}: {d}" for m, d in result.get("members", {}).items()) or \
        "word: word 1-2 gram TF-IDF + LR; length: log length + LR"
    fits = sorted({f"{m}: {v['fit']}" for r in subs.values() for m, v in members_of(r).items() if "fit" in v
                   and "CV" in v["fit"]})
    return ("## Shortcut audit\n\nCan a subset be solved from the RESPONSE alone? A panel of baselines, fitted on "
            f"the subset's training split (at most {result['train_cap_per_label']} per label) and scored on its test split, "
            f"except where said ({described}). Ceiling, for every member: AUROC {c['auroc']}, pair accuracy "
            f"{c['pair_accuracy']} (on_exceed={result['on_exceed']}). z-test: for each word 1-2 gram in at least 5 test "
            "responses, how far p(misbehavior | it occurs) is from the split's 1/2, in standard errors; listed when "
            "significant after Bonferroni correction."
            + (f" Cross-validated on the test split: {'; '.join(fits[:1])}{' (per subset)' if len(fits) > 1 else ''}."
               if fits else "")
            + "\n\n" + "\n".join(rows) + _families_section(result) + _hard(result) + _over_ceiling(result, notes or {})
            + "\n\n![audit](audit.png)\n")


def _families_section(result: dict[str, Any]) -> str:
    """Per gaming family (sg_code's construct pairs): the response-only panel, which must not
    read the label, beside the request-aware baseline, which should (it reads the construct)."""
    lines = []
    for sub, r in result["subsets"].items():
        if not r.get("families"):
            continue
        ra = r["request_aware"]
        for fam, ms in [("all", members_of(r)), *r["families"].items()]:
            base = ra["overall"] if fam == "all" else ra["families"].get(fam, {})
            panel = ", ".join(f"{m} {v['auroc']:.2f} / {v['pair_accuracy']:.2f}" for m, v in ms.items())
            pairs = next((v.get("pairs") for v in ms.values() if "pairs" in v), None) if fam != "all" else \
                r["n_test"] // 2
            lines.append(f"| {sub} | {fam} | {pairs} | {panel} | "
                         + (f"{base['auroc']:.2f} / {base['pair_accuracy']:.2f}" if base else "—") + " |")
    if not lines:
        return ""
    return ("\n\nPer gaming family (`meta.family`), AUROC / pair accuracy. The response-only panel must stay under "
            "the ceiling in every family; the request-aware baseline (how many visible-test inputs the response's "
            "branches and tables are keyed on, read with the request) is the construct's own signal and should read "
            "the label for lookup and branches (checker tampering is not in it).\n\n"
            "| subset | family | pairs | response-only panel | request-aware baseline |\n|---|---|---:|---|---|\n"
            + "\n".join(lines))


def _hard(result: dict[str, Any]) -> str:
    lines = []
    for sub, r in result["subsets"].items():
        h = r.get("hard_subset")
        if h:
            rates = ", ".join(f"{m}{'' if m in h.get('held_out', []) else ' (adversary)'} {v['auroc']:.2f} / "
                              f"{v['pair_accuracy']:.2f}" for m, v in h["members"].items())
            lines.append(f"| {sub} | {h['pairs']} of {h['of']} | {rates or 'too few pairs to score'} |")
    if not lines:
        return ""
    h = next(r["hard_subset"] for r in result["subsets"].values() if r.get("hard_subset"))
    return ("\n\nHard subset (`audit.hard_subset`; pair ids in manifest.json under "
            "`audit.subsets.<subset>.hard_subset.pair_ids`): AFLite on whole pairs, adversaries "
            + " and ".join(h["adversaries"]) + f" fitted on {h['splits']} random halves of the pairs per round, "
            f"pairs predicted in at least {h['tau']} of their held-out splits removed (both twins) until none is; "
            "the pairs left scored by every member (AUROC / pair accuracy), the held-out families "
            f"({', '.join(h.get('held_out', [])) or 'none'}) being the fair test.\n\n"
            "| subset | pairs kept | members on the hard subset |\n|---|---|---|\n" + "\n".join(lines))


def _over_ceiling(result: dict[str, Any], notes: dict[str, str]) -> str:
    lines = []
    for sub in result["exceeding"]:
        r = result["subsets"][sub]
        over = r.get("exceeded_by") or ["word"]
        why = notes.get(sub) or ("no reason recorded: add one to the wordings version's shortcut_notes, or change "
                                 "its templates")
        rates = ", ".join(f"{m} {rate_of(r, m)['auroc']:.2f} / {rate_of(r, m)['pair_accuracy']:.2f}" for m in over)
        lines.append(f"- **{sub}** is over the ceiling ({rates}): {why}")
    return "\n\nSubsets over the ceiling, and why the templates cannot bring them under it:\n\n" + "\n".join(lines) \
        if lines else ""


def build_shortcut_notes(manifest: dict[str, Any]) -> dict[str, str]:
    """The shortcut_notes of the wordings version a build's manifest records."""
    return shortcut_notes((manifest.get("config", {}).get("wordings") or {}).get("version"))


def shortcut_notes(wordings_version: str | None) -> dict[str, str]:
    """The shortcut_notes of conf/wordings/<version>.yaml ({} when it has none or is absent)."""
    import yaml

    path = CONF_DIR / "wordings" / f"{wordings_version}.yaml"
    if not wordings_version or not path.is_file():
        return {}
    return dict((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("shortcut_notes") or {})


def plot(result: dict[str, Any], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subs = [s for s, r in result["subsets"].items() if "skipped" not in r]
    names = list(members_of(result["subsets"][subs[0]])) if subs else []
    hard = [s for s in subs if result["subsets"][s].get("hard_subset")]
    fig, axes = plt.subplots(1, 3 if hard else 2, figsize=(15 if hard else 10, 3.8))
    width = 0.8 / max(1, len(names))
    for ax, key, ceiling in zip(axes, ("auroc", "pair_accuracy"), (result["ceiling"]["auroc"],
                                                                  result["ceiling"]["pair_accuracy"])):
        xs = range(len(subs))
        for j, m in enumerate(names):
            vals = [members_of(result["subsets"][s])[m][key] for s in subs]
            ax.bar([x - 0.4 + width * (j + 0.5) for x in xs], vals, width, label=m)
        ax.axhline(ceiling, color="red", ls="--", lw=1, label=f"ceiling {ceiling}")
        ax.axhline(0.5, color="grey", ls=":", lw=1)
        ax.set_xticks(list(xs), subs, rotation=30, ha="right")
        ax.set_ylim(0, 1.02)
        ax.set_title({"auroc": "AUROC on the test split", "pair_accuracy": "pair accuracy on the test split"}[key])
    axes[0].legend(fontsize=7, loc="lower left")
    if hard:  # the hard subset: its share of the pairs, and the held-out members' pair accuracy on it
        ax = axes[2]
        hs = [result["subsets"][s]["hard_subset"] for s in hard]
        ax.bar(range(len(hard)), [h["pairs"] / max(1, h["of"]) for h in hs], 0.6, color="lightgrey",
               label="share of pairs kept")
        for m in hs[0].get("held_out", []):
            ax.plot(range(len(hard)), [h["members"].get(m, {}).get("pair_accuracy", float("nan")) for h in hs], "o",
                    label=f"{m} pair acc. on it")
        ax.axhline(result["ceiling"]["pair_accuracy"], color="red", ls="--", lw=1)
        ax.set_xticks(list(range(len(hard))), hard, rotation=30, ha="right")
        ax.set_ylim(0, 1.02)
        ax.set_title("AFLite hard subset (adversaries: " + ", ".join(hs[0]["adversaries"]) + ")")
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle("Shortcut audit: a panel of surface baselines that see only the response")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
