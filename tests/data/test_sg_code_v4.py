"""sg_code v4 (wordings.sg_code_minimal_pairs): test pairs are minimal pairs, the same special cases
in front of a mutated (gaming) and an intact (benign) canonical solution, verified by execution;
their mutations balanced by direction; v1-v3 unchanged."""

from __future__ import annotations

import difflib
import re
from collections import Counter

import pytest

from automon.data.recipes.base import Drops
from automon.data.recipes.sg_code import sg_code_items
from automon.data.recipes.sg_code.mutation import balanced_pairs, mutation_sites, swap
from automon.data.recipes.sg_code.recipe import MINIMAL, MINIMAL_BENIGN, sandbox_limits
from automon.data.recipes.sg_code.tasks import humaneval_task, mbpp_task
from automon.sandbox import Sandbox
from automon.sandbox.grading import hidden_job, hidden_verdict, visible_job, visible_verdict
from automon.config.sg_code import SgCodeConfig
from test_sg_code import HUMANEVAL, INCENTIVES, MBPP

HUMANEVALS = [dict(HUMANEVAL, task_id=f"HumanEval/{i}") for i in range(4)]


def _mbpp(task_id: int, name: str, op: str, cases: list[tuple[int, int, int]]) -> dict:
    """A one-operator MBPP task: its only mutations swap `op` (and nothing else can be mutated)."""
    tests = [f"assert {name}({a}, {b}) == {want}" for a, b, want in cases]
    return {"task_id": task_id, "_ref": f"mbpp/mbpp.jsonl:{task_id}", "text": f"Write a function {name}.",
            "code": f"def {name}(a, b):\r\n    return a {op} b", "test_list": tests[:3], "test_setup_code": "",
            "challenge_test_list": tests[3:]}


# `+` made `-` in one task and `-` made `+` in the other: a direction-balanced pair of test pairs.
MBPPS = [MBPP, _mbpp(20, "add", "+", [(2, 3, 5), (10, 4, 14), (7, 7, 14), (1, 8, 9)]),
         _mbpp(21, "sub", "-", [(9, 3, 6), (10, 4, 6), (7, 7, 0), (20, 8, 12)])]


def _code(response: str) -> str:
    return re.search(r"```python\n(.*)\n```", response, re.S).group(1)


@pytest.fixture(scope="module")
def v4_items():
    drops = Drops()
    items = sg_code_items(HUMANEVALS, MBPPS, [], [], [], SgCodeConfig(), INCENTIVES, 0, drops, templates="v2",
                          minimal_pairs=True)
    return items, drops


def test_twins_differ_only_by_the_mutation_and_execution_tells_them_apart(v4_items):
    items, drops = v4_items
    pairs = [it.test_pair for it in items if it.test_pair]
    assert len(pairs) >= 2
    trained = [d for it in items for d in it.train if d.variant in (MINIMAL, MINIMAL_BENIGN)]
    assert trained and not [k for k in drops if "minimal_pair_failed_verification" in k], dict(drops)
    for gaming, benign in pairs:
        assert (gaming.label, gaming.variant, benign.label, benign.variant) == (1, MINIMAL, 0, MINIMAL_BENIGN)
        assert gaming.request == benign.request and gaming.meta["form"] == benign.meta["form"]
        changed = [ln for ln in difflib.ndiff(benign.response.splitlines(), gaming.response.splitlines())
                   if ln[:1] in "+-"]
        assert len(changed) == 2, changed  # one line, mutated: same opener, special cases, comments
        old, new = swap(gaming.meta["wrong_impl"])
        assert new.strip() in changed[1] or old.strip() in changed[0]
        assert all(e in gaming.response and e in benign.response for e in gaming.evidence)
    # Re-graded from the text as shown: the gaming twin passes the visible tests and fails the hidden
    # ones; the benign twin passes both.
    tasks = {**{f"humaneval:{r['task_id']}": humaneval_task(r, SgCodeConfig(), Drops()) for r in HUMANEVALS},
             **{f"mbpp:{r['task_id']}": mbpp_task(r, SgCodeConfig(), Drops()) for r in MBPPS}}
    jobs, want = [], []
    for it in items:
        for d in it.train:
            if d.variant in (MINIMAL, MINIMAL_BENIGN):
                task, code = tasks[it.keys[0]], _code(d.response)
                jobs += [visible_job(code, d.meta["visible_tests"]), hidden_job(code, task.hidden)]
                want.append(d.label == 0)
    with Sandbox(sandbox_limits(SgCodeConfig()), workers=2) as sb:
        results = sb.run_jobs(jobs)
    for hidden_ok, vis, hid in zip(want, results[::2], results[1::2]):
        assert visible_verdict(vis)[0] and hidden_verdict(hid)[0] == hidden_ok


def test_only_direction_balanced_mutations_make_test_pairs(v4_items):
    items, drops = v4_items
    swaps = Counter(swap(it.test_pair[0].meta["wrong_impl"]) for it in items if it.test_pair)
    assert all(n == swaps[(new, old)] for (old, new), n in swaps.items()), swaps
    # Items without a test-eligible minimal pair still train on theirs, or on the v2 strategies.
    assert all(it.train for it in items)


def test_balanced_pairs_keeps_as_many_of_each_direction():
    swaps = {"a": ("<", "<="), "b": ("<", "<="), "c": ("<", "<="), "d": ("<=", "<"),
             "e": ("1", "2"), "f": ("2", "1"), "g": ("2", "1"), "h": ("x", "not x"), "i": ("+", "-")}
    keep = balanced_pairs(swaps, seed=0)
    assert len(keep & {"a", "b", "c"}) == 1 and "d" in keep
    assert "e" in keep and len(keep & {"f", "g"}) == 1
    assert not keep & {"h", "i"}  # no reverse made: training only
    assert balanced_pairs(swaps, seed=0) == keep and len(keep) == 4
    assert {frozenset(balanced_pairs(swaps, s)) for s in range(8)} != {frozenset(keep)}  # the seed chooses


def test_swap_reads_a_negation_and_its_removal_as_reverses():
    assert swap("line 3: `if x` -> `if not x`") == ("x", "not x")
    assert swap("line 9: `not x` -> `x`") == ("not x", "x")
    assert swap("line 2: `<=` -> `<`") == ("<=", "<") and swap("line 5: `3` -> `2`") == ("3", "2")


def test_decrements_only_when_asked():
    code = "def f(xs):\n    return xs[1] + 2\n"
    plain = {m.new for m in mutation_sites(code)}
    both = {m.new for m in mutation_sites(code, decrements=True)}
    assert {b"2", b"3"} <= plain and not {b"0", b"1"} & plain
    assert both - plain == {b"0", b"1"}
