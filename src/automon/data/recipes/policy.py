"""Policy recipes (SubsetSpec.policy_recipe): the template recipe's items, with test pairs written by
the policy model (automon.policy).

For a subset in `policy.subsets`, the build runs the subset's template recipe first (it knows the
sources, the cue wordings, the gold answers and the training variants), then hands the items to the
subset's policy recipe, `(ctx, items, policy, report) -> items`:

- sycophancy (syco_qa: MMLU, TruthfulQA; syco_reasoning: GSM8K): `sycophancy_policy_items`, the
  counterfactual filter. A kept item's test pair is (cued answer, label 1; uncued correct answer,
  label 0), both under the cued request; its training samples are the same pair. Every other item of
  the subset keeps its template training samples and is not test-eligible, so the subset's test set
  is the policy's alone.
- sg_code: `automon.data.recipes.sg_code_policy` (answers under the incentive, labelled by execution).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

from automon.data.recipes.base import Draft, Item
from automon.data.recipes.common import parse_options, short_hash
from automon.policy.counterfactual import Candidate, Funnel, judge
from automon.policy.extract import normalize_number, split_answers
from automon.policy.generate import Ask

RECIPE = "policy_counterfactual"


def cap_per_source(pairs: list, subset: str, seed: int, cap: int | None, source_of: Callable) -> list:
    """Which template items the policy is asked about (every policy recipe): at most `cap` per source,
    chosen by a seeded hash of the item key (order-independent)."""
    by_src: "OrderedDict[str, list]" = OrderedDict()
    for p in sorted(pairs, key=lambda p: short_hash(seed, subset, "policy", p[0].keys[0], n=16)):
        by_src.setdefault(source_of(p), []).append(p)
    return [p for lst in by_src.values() for p in (lst if cap is None else lst[:cap])]


def strip_cue(request: str, cue: str) -> str | None:
    """The question without its cue (a template request is `question + "\\n\\n" + cue`, or the cue first)."""
    if request.endswith("\n\n" + cue):
        return request[: -len(cue) - 2]
    if request.startswith(cue + "\n\n"):
        return request[len(cue) + 2:]
    return None


def candidate(item: Item, tqa_rows: dict[str, dict]) -> Candidate | None:
    """The counterfactual candidate of a template sycophancy item, or None if it is not one."""
    if item.test_pair is None:
        return None
    mis = item.test_pair[0]
    m = mis.meta
    src = m.get("source_dataset")
    if src not in ("mmlu", "truthfulqa", "gsm8k") or "cue" not in m:
        return None
    question = strip_cue(mis.request, m["cue"])
    if question is None:
        return None
    base = dict(key=item.keys[0], source=src, ref=item.source, question=question, cued=mis.request)
    if src == "mmlu":
        return Candidate(**base, task="choice", gold=m["correct"], cue_answer=m["cued"], options=parse_options(question))
    if src == "gsm8k":
        return Candidate(**base, task="number", gold=normalize_number(m["gold"]) or m["gold"],
                         cue_answer=normalize_number(m["cued"]) or m["cued"])
    d = tqa_rows.get(item.source.split(":", 1)[1])
    if d is None:
        return None
    correct = tuple(dict.fromkeys([d["Best Answer"].strip(), *split_answers(d.get("Correct Answers", ""))]))
    return Candidate(**base, task="truthfulqa", gold="correct", cue_answer="incorrect", correct_answers=correct,
                     incorrect_answers=tuple(split_answers(d["Incorrect Answers"])))


def sycophancy_policy_items(rctx: Any, items: list[Item], policy: Any, report: dict) -> list[Item]:
    cfg, subset = rctx.cfg, rctx.spec.name
    tqa = {r.ref: r.data for r in rctx.rows("truthfulqa")} if "truthfulqa" in rctx.spec.sources else {}
    pairs = [(it, c) for it in items if (c := candidate(it, tqa)) is not None]
    asked = cap_per_source(pairs, subset, cfg.seed, cfg.policy.max_items_per_source, lambda p: p[1].source)
    asks = [Ask(f"{subset}:{c.key}:{w}", text) for _, c in asked for w, text in (("nocue", c.question), ("cue", c.cued))]
    answers = policy.answer(asks)
    funnel = Funnel()
    who = policy.describe()
    kept: dict[int, tuple[Draft, Draft]] = {}
    for it, c in asked:
        a0, a1 = answers[f"{subset}:{c.key}:nocue"], answers[f"{subset}:{c.key}:cue"]
        if a0.error is not None or a1.error is not None:
            rctx.drops.add(subset, "policy_generation_error")
            continue
        o = judge(c, a0.text or "", a1.text or "")
        funnel.add(o)
        if not o.kept:
            continue
        tmpl = it.test_pair[0].meta
        meta = {"recipe": RECIPE, "generator": "policy", "source_dataset": c.source, "cue": tmpl["cue"],
                "wordings": tmpl.get("wordings"), "gold": c.gold, "cued": c.cue_answer, "policy": who,
                "extraction": {"without_cue": o.uncued.to_meta(), "with_cue": o.cued.to_meta()}}
        mis = Draft(c.cued, o.cued_text, 1, [o.cued.span], {**meta, "adopts_cue": o.adopted_cue}, "policy")
        ben = Draft(c.cued, o.uncued_text, 0, [], {**meta, "adopts_cue": False}, "policy")
        kept[id(it)] = (mis, ben)
    report["funnel"] = funnel.to_dict()
    out = []
    for it in items:
        pair = kept.get(id(it))
        # Not kept (or never asked): its template samples may still train; its test pair is gone.
        out.append(Item(it.keys, it.subset, it.source, pair, list(pair)) if pair else
                   Item(it.keys, it.subset, it.source, None, it.train))
    return out

