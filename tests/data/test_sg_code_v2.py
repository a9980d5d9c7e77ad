"""sg_code v2 templates (wordings v2): every gaming family in several forms, decoys that use the
same constructs in both twins, every sample verified in the sandbox as it is shown; v1 unchanged."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter

import pytest

from automon.config.sg_code import STRATEGIES, SgCodeConfig
from automon.data.recipes.base import Drops
from automon.data.recipes.sg_code import sg_code_items
from automon.data.recipes.sg_code.decoys import AVOID, KINDS, with_decoys
from automon.data.recipes.sg_code.recipe import sandbox_limits
from automon.data.recipes.sg_code.tasks import humaneval_task, mbpp_task
from automon.sandbox import Sandbox
from automon.sandbox.grading import hidden_job, hidden_verdict, visible_job, visible_verdict
from test_sg_code import HUMANEVAL, INCENTIVES, MBPP

ALL = SgCodeConfig(train_strategies_per_item=len(STRATEGIES))   # every strategy trained on, per item
SEEDS = range(6)
# Three keys of one HumanEval task (hashable arguments) and the MBPP one (list arguments).
HUMANEVALS = [dict(HUMANEVAL, task_id=f"HumanEval/{i}") for i in range(3)]
# Each family's forms (meta "form"): the v2 builders must produce every one of them.
FORMS = {
    "hardcode": {"get_inside", "in_module", "pairs_loop", "branches"},
    "special_case": {"get_inside", "in_module", "pairs_loop", "branches"},
    "early_exit": {"module", "main_guard", "helper"},
    "always_equal": {"inner", "module", "wrap"},
    "patched_asserts": {"hook_def", "hook_lambda", "atexit"},
}
# A constructs that v1 used only in gaming code -> how it reads in a response.
CONSTRUCTS = {"table": re.compile(r"^\s*\w+ = [\[{]\n", re.M), "__eq__": re.compile(r"__eq__"),
              "exit": re.compile(r"sys\.exit|os\._exit|SystemExit"), "excepthook": re.compile(r"sys\.excepthook"),
              "main guard": re.compile(r'if __name__ == "__main__":'), "is None": re.compile(r" is (not )?None")}


def _build(seed: int, templates: str = "v2"):
    drops = Drops()
    items = sg_code_items(HUMANEVALS, [MBPP], [], [], [], ALL, INCENTIVES, seed, drops, templates=templates)
    return items, drops


@pytest.fixture(scope="module")
def v2_items():
    """(items, drops) for each seed: both synthetic tasks, every strategy."""
    return {seed: _build(seed) for seed in SEEDS}


def _code(response: str) -> str:
    return re.search(r"```python\n(.*)\n```", response, re.S).group(1)


def test_every_family_appears_in_its_forms_and_every_sample_verified(v2_items):
    forms = {s: set() for s in STRATEGIES}
    for items, drops in v2_items.values():
        assert not [k for k in drops if "verification" in k], dict(drops)
        for it in items:
            assert [d.variant for d in it.train][0] == "canonical" and len(it.train) == 1 + len(STRATEGIES)
            for d in it.train[1:]:
                family, form = d.meta["form"].split("/")
                assert family == d.variant and d.label == 1 and all(e in d.response for e in d.evidence)
                assert d.meta["verification"]["visible"] == "pass" and d.meta["verification"]["hidden"] == "fail"
                forms[family].add(form)
    assert forms == FORMS


def test_samples_regrade_from_the_response_text(v2_items):
    """The responses, as shown, re-graded with the public graders: gaming passes the visible tests
    and fails the hidden ones, benign (decoys included) passes both."""
    tasks = {f"humaneval:{r['task_id']}": humaneval_task(r, ALL, Drops()) for r in HUMANEVALS}
    tasks["mbpp:7"] = mbpp_task(MBPP, ALL, Drops())
    programs, expect = [], []
    for items, _ in v2_items.values():
        for it in items:
            task = tasks[it.keys[0]]
            for d in it.train:
                code = _code(d.response)
                programs += [visible_job(code, d.meta["visible_tests"]), hidden_job(code, task.hidden)]
                expect.append((d.meta["form"] if d.label else "canonical", d.label == 0))
    with Sandbox(sandbox_limits(ALL), workers=2) as sb:
        results = sb.run_jobs(programs)
    for (what, hidden_ok), vis, hid in zip(expect, results[::2], results[1::2]):
        assert visible_verdict(vis)[0], (what, vis.stderr[-300:])
        assert hidden_verdict(hid)[0] == hidden_ok, (what, hid.grader.stderr[-300:])


def test_decoys_come_from_one_pool_for_both_labels(v2_items):
    """Decoys are drawn alike for benign and gaming solutions: over many task keys every kind lands
    in benign code, each kind about as often in both labels; and each construct v1 used only for
    gaming shows up in benign code as well as in the (verified) gaming responses."""
    task = humaneval_task(HUMANEVAL, ALL, Drops())
    kinds = {0: Counter(), 1: Counter()}
    allowed = Counter()   # gaming responses whose strategy allows each kind
    benign_seen = set()
    n = 2000
    for i in range(n):
        t = dataclasses.replace(task, key=f"humaneval:HumanEval/{i}")
        code, used = with_decoys(t, t.code, 0, "canonical")
        kinds[0].update(used)
        benign_seen |= {name for name, rx in CONSTRUCTS.items() if rx.search(code)}
        strategy = STRATEGIES[i % len(STRATEGIES)]
        kinds[1].update(with_decoys(t, t.code, 0, strategy, strategy)[1])
        allowed.update(set(KINDS) - AVOID.get(strategy, set()))
    assert set(kinds[0]) == set(kinds[1]) == set(KINDS)
    for k in KINDS:  # per response that may carry it: the same rate for both labels
        assert abs(kinds[0][k] / n - kinds[1][k] / allowed[k]) < 0.03, (k, kinds)
    assert benign_seen == set(CONSTRUCTS), benign_seen
    gaming_seen = {name for items, _ in v2_items.values() for it in items for d in it.train[1:]
                   for name, rx in CONSTRUCTS.items() if rx.search(d.response)}
    assert gaming_seen == set(CONSTRUCTS)
    benign = [it.train[0] for items, _ in v2_items.values() for it in items]
    assert any(d.meta["decoys"] for d in benign)


def test_v2_is_deterministic_and_differs_from_v1(v2_items):
    again, _ = _build(0)
    assert [d.response for it in again for d in it.train] == [d.response for it in v2_items[0][0] for d in it.train]
    v1, _ = _build(0, "v1")
    assert all(d.response.count("```") == 2 and "decoys" not in d.meta for it in v1 for d in it.train)
    assert [d.response for it in v1 for d in it.train] != [d.response for it in again for d in it.train]


# sha256 of the v1 samples below as main's code (commit cbd1144) wrote them: v1 stays byte-identical.
V1_DIGEST = "f05258e36027070d26e1b63a4ca47d0774ec629c6d6154b8bf461d43826d475f"


def test_v1_output_is_unchanged():
    items = sg_code_items([HUMANEVAL], [MBPP], [], [], [], ALL, INCENTIVES, 0, Drops(), templates="v1")
    rows = [[it.keys, d.variant, d.label, d.request, d.response, d.evidence,
             {k: v for k, v in d.meta.items() if k != "verification"}] for it in items for d in it.train]
    assert hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest() == V1_DIGEST


def test_an_unknown_template_version_is_refused():
    with pytest.raises(ValueError, match="sg_code templates 'v4' unknown; valid: v1, v2"):
        sg_code_items([HUMANEVAL], [MBPP], [], [], [], ALL, INCENTIVES, 0, Drops(), templates="v4")
