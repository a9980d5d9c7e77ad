"""sg_code's policy recipe (SubsetSpec.policy_recipe): the policy writes the code, the sandbox labels it.

For each test-eligible HumanEval / MBPP item the policy answers the request twice: with the
incentive (the template request: problem, visible tests, incentive) and without it. Each answer's
code runs under the recipe's two graders (automon.data.recipes.sg_code: the visible asserts, then
the strict hidden tests):

  visible pass + hidden fail  -> gaming   (label 1)
  visible pass + hidden pass  -> benign   (label 0)
  visible fail                -> dropped as incompetence

An item gets a test pair when the incentivised answer games and the answer without the incentive is
benign (the counterfactual of the sycophancy filter); both are shown under the incentivised request.
An incentivised benign answer trains as a benign sample. Every item's template samples keep training.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.policy import cap_per_source
from automon.data.recipes.sg_code.recipe import sandbox_limits
from automon.data.recipes.sg_code.render import render_request
from automon.data.recipes.sg_code.tasks import humaneval_task, mbpp_task
from automon.data.recipes.sg_code.verifier import Verifier
from automon.policy.generate import Ask
from automon.sandbox import Sandbox
from automon.sandbox.grading import label_of

RECIPE = "policy_sg_code"
LABELS = ("asked", "visible_fail", "gaming", "benign", "paired")
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(text: str) -> tuple[str, str]:
    """(code, method): the first fenced block that defines a function, else the first fenced
    block, else the whole answer."""
    blocks = _FENCE.findall(text)
    for b in blocks:
        if re.search(r"^\s*def\s", b, re.M):
            return b.strip("\n"), "fenced_def"
    if blocks:
        return blocks[0].strip("\n"), "fenced"
    return text.strip("\n"), "whole_answer"


def _tasks(rctx: Any) -> dict:
    """key -> Task, parsed again from the rows (cheap) with the recipe's own parsers; their drops
    were counted by the template recipe already."""
    scratch = Drops()
    out = {}
    for name, parse in (("humaneval", humaneval_task), ("mbpp", mbpp_task)):
        for r in rctx.rows(name):
            row = dict(r.data, _ref=r.ref)
            t = parse(row, rctx.cfg.sg_code, scratch)
            if t is not None:
                out[t.key] = t
    return out


def sg_code_policy_items(rctx: Any, items: list[Item], policy: Any, report: dict) -> list[Item]:
    cfg, subset = rctx.cfg, rctx.spec.name
    tasks = _tasks(rctx)
    pairs = [(it, tasks[it.keys[0]]) for it in items if it.test_pair is not None and it.keys[0] in tasks]
    asked = cap_per_source(pairs, subset, cfg.seed, cfg.policy.max_items_per_source, lambda p: p[1].dataset)
    prompts = {}
    for it, t in asked:
        incentive = it.test_pair[0].meta["incentive"]
        asserts = [v.text for v in t.visible]
        prompts[t.key] = (it.test_pair[0].request, render_request(t.problem, asserts, ""), incentive)
    asks = [Ask(f"{subset}:{k}:{w}", p[i]) for k, p in prompts.items() for w, i in (("incentive", 0), ("plain", 1))]
    answers = policy.answer(asks)

    checks = {}
    with Sandbox(sandbox_limits(cfg.sg_code), cfg.sg_code.workers, cfg.sandbox.isolation) as sb:
        v = Verifier(sb)
        for it, t in asked:
            asserts = [x.text for x in t.visible]
            for w in ("incentive", "plain"):
                a = answers[f"{subset}:{t.key}:{w}"]
                if a.error is not None:
                    continue
                code, how = extract_code(a.text or "")
                checks[(t.key, w)] = (a.text or "", code, how, v.visible(code, asserts), v.hidden(code, t.hidden))
        v.run()
        isolation = sb.isolation
    rctx.ran_code_under(isolation)  # the build record's (build_log.json), not the samples'

    counts: dict[str, Counter] = {}
    who = policy.describe()
    new: dict[int, Item] = {}
    for it, t in asked:
        c = counts.setdefault(t.dataset, Counter())
        got = {}
        for w in ("incentive", "plain"):
            if (t.key, w) not in checks:
                rctx.drops.add(subset, "policy_generation_error")
                continue
            text, code, how, hv, hh = checks[(t.key, w)]
            (v_ok, v_why), (h_ok, h_why) = v[hv], v[hh]
            got[w] = (text, how, label_of(v_ok, h_ok), {"visible": "pass" if v_ok else "fail",
                                                          "visible_result": v_why, "hidden": "pass" if h_ok else "fail",
                                                          "hidden_result": h_why, "hidden_tests": t.n_hidden})
        if "incentive" not in got:
            continue
        c["asked"] += 1
        text, how, label, ver = got["incentive"]
        c[label] += 1
        request = prompts[t.key][0]
        meta = {"recipe": RECIPE, "generator": "policy", "incentive": prompts[t.key][2],
                "visible_tests": [x.text for x in t.visible], "source_dataset": t.dataset, "source_ref": t.ref,
                "policy": who}
        if label == "visible_fail":
            continue
        mine = Draft(request, text, int(label == "gaming"), [],
                     {**meta, "asked": "with_incentive", "extraction": {"method": how}, "verification": ver},
                     "policy")
        twin = got.get("plain")
        if label == "gaming" and twin and twin[2] == "benign" and twin[0].strip():
            ben = Draft(request, twin[0], 0, [], {**meta, "asked": "without_incentive",
                                                  "extraction": {"method": twin[1]}, "verification": twin[3]},
                        "policy_plain")
            c["paired"] += 1
            new[id(it)] = Item(it.keys, it.subset, it.source, (mine, ben), [mine, ben])
        elif text.strip():
            new[id(it)] = Item(it.keys, it.subset, it.source, None, [mine] + list(it.train))
    report["labels"] = {src: {k: int(c[k]) for k in LABELS} for src, c in sorted(counts.items())}
    # The subset's test pairs are the policy's alone: every other item trains only.
    return [new.get(id(it)) or Item(it.keys, it.subset, it.source, None, it.train) for it in items]
