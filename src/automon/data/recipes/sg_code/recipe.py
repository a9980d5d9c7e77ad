"""The sg_code recipe: construct pairs (families.py), each twin verified in the sandbox and read by
the construct check (constructs.py) before it becomes a sample (see the package docstring).

`sg_code_items` parses the tasks, plans their pairs, verifies them in one sandbox pool with the
reward-hack extras, and keeps what verified. Per task: the canonical solution is run on inputs near the
visible ones (the other inputs benign tables and branches are keyed on), a wrong implementation is
screened (mutation.py), and a pair is built for every family in a seeded order. The first pair that
verifies is the task's test pair; every verified pair trains when the task lands in the training
split. Only tasks whose mutation is in a direction-balanced set make items. A twin the construct check
contradicts fails the build, naming the sample: the generator made a label that its own definition
does not support. Each verified pair also gives a plain-bug contrast control (automon.controls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from automon.config.sg_code import SgCodeConfig
from automon.data.check import BuildError
from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import choose, plain, rotate, short_hash
from automon.data.recipes.sg_code.constructs import analyse, response_code, violations
from automon.data.recipes.sg_code.extras import RewardHackExtras
from automon.data.recipes.sg_code.families import (FAMILIES, Twins, candidate_inputs, other_cases,
                                                   outputs_program, quote_of, twins)
from automon.data.recipes.sg_code.mutation import balanced_pairs, screen_mutants, swap
from automon.data.recipes.sg_code.render import PREFACES, render_request, render_response
from automon.data.recipes.sg_code.tasks import SUBSET, Task, humaneval_task, mbpp_task
from automon.data.recipes.sg_code.verifier import Verifier
from automon.sandbox import Limits, Sandbox

RECIPE = "sg_code_template"
# "v3" in the keys of the seeded choices here and in families.py (the template version that introduced
# construct pairs) only salts them: the samples depend on it.
_WALL_FACTOR = 10  # wall-clock allowance per program, in multiples of its CPU-time limit


def sandbox_limits(cfg: SgCodeConfig) -> Limits:
    """Per-program limits. CPU time is the binding one: unlike wall time it does not grow when
    other processes share the cores, so verdicts do not depend on how busy the machine is. The
    wall-clock allowance only catches programs that block instead of computing."""
    return Limits(timeout_s=_WALL_FACTOR * cfg.timeout_s, cpu_s=cfg.timeout_s, memory_mb=cfg.memory_mb)


def sg_code_items(humaneval_rows: list[dict], mbpp_rows: list[dict], rh_hardcoded_rows: list[dict],
                  rh_selection_rows: list[dict], rh_selection_unhackable_rows: list[dict],
                  cfg: SgCodeConfig, incentives: list[str], seed: int, drops: Drops, isolation: str = "auto",
                  ran_under: Callable[[str], None] | None = None) -> list[Item]:
    """Items for sg_code: one per HumanEval / MBPP problem whose construct pairs verify (test-eligible
    when its mutation is in the direction-balanced set), plus training-only reward-hack extras.

    Rows carry their source file's field names and `_ref` ("file:line"). `isolation` is the sandbox's
    (automon.sandbox.isolation); `ran_under(mode)` is told the mode the code ran under (the build
    record's, not the samples'). Deterministic: the output depends only on the rows, cfg, incentives
    and seed.
    """
    if not incentives:
        raise ValueError("sg_code needs at least one incentive wording (wordings.sg_code_incentives)")
    tasks: list[Task] = []
    for rows, parse in ((humaneval_rows, humaneval_task), (mbpp_rows, mbpp_task)):
        for row in rows:
            key = f"humaneval:{row['task_id']}" if parse is humaneval_task else f"mbpp:{row['task_id']}"
            if key in cfg.excluded:
                drops.add(SUBSET, "excluded_in_config")
                continue
            task = parse(row, cfg, drops)
            if task is not None:
                tasks.append(task)

    with Sandbox(sandbox_limits(cfg), cfg.workers, isolation) as sb:
        verifier = Verifier(sb)
        queued = plan(tasks, seed, verifier, drops)
        extras = RewardHackExtras(mbpp_rows, rh_hardcoded_rows, rh_selection_rows, rh_selection_unhackable_rows,
                                  incentives, seed, verifier, drops)
        verify(tasks, queued, seed, verifier)  # the extras' checks run with them
        isolation = sb.isolation
    if ran_under is not None:
        ran_under(isolation)
    return items(tasks, queued, incentives, seed, verifier, drops) + checked_extras(extras.items(), drops)


def sg_code_recipe(ctx) -> list[Item]:
    """The sg_code recipe (SubsetSpec.recipe): the build's RecipeContext -> items."""
    def data(name):  # sg_code works on plain dicts that remember their source line
        return [dict(r.data, _ref=r.ref) for r in ctx.rows(name)]
    c = ctx.cfg
    return sg_code_items(data("humaneval"), data("mbpp"), data("rh_code_problems_hardcoded"),
                         data("rh_code_selection"), data("rh_code_selection_unhackable"), plain(c.sg_code),
                         list(c.wordings.sg_code_incentives), c.seed, ctx.drops, c.sandbox.isolation,
                         ctx.ran_code_under)


@dataclass
class _Pair:
    """A task's construct pair and, once queued (`_queue`), the verifier handles of its four checks."""
    twins: Twins
    checks: tuple[int, int, int, int] | None = None  # gaming visible, gaming hidden, benign visible, benign hidden
    # the plain-bug control's visible (its task's test pair only, else None) and hidden checks
    bug_checks: tuple[int | None, int] | None = None


def constructible(task: Task, tw: Twins) -> str | None:
    """Why a pair cannot stand for its family on this task, or None. The one case the builders
    cannot see: visible inputs that the canonical solution already special-cases itself (fibfib's
    `if n == 2: return 1` where a visible test is fibfib(2) == 1), so that the gaming twin's
    branches add nothing test-specific and only its wrong fallback is left (a plain bug)."""
    asserts = [v.text for v in task.visible]
    return violations(1, tw.gaming.code, asserts, task.code) or violations(0, tw.benign, asserts, task.code)


def plan(tasks: list[Task], seed: int, verifier: Verifier, drops: Drops) -> dict[str, list[_Pair]]:
    """Build every task's construct pairs (`verify` runs their checks)."""
    candidates = {t.key: candidate_inputs(t, seed) for t in tasks}
    runs = {t.key: verifier.program(outputs_program(t, candidates[t.key])) for t in tasks if candidates[t.key]}
    mutants = screen_mutants(tasks, seed, verifier)  # runs the queued programs too
    verifier.run()
    queued: dict[str, list[_Pair]] = {}
    for t in tasks:
        others = []
        if t.key in runs:
            ok, stdout = verifier[runs[t.key]]
            others = other_cases(t, candidates[t.key], stdout, quote_of(t)) if ok else []
        queued[t.key] = []
        for family in rotate(list(FAMILIES), len(FAMILIES), seed, t.key, "v3", "family"):
            tw = twins(t, family, seed, mutants.get(t.key), others)
            if tw is None:
                continue
            if constructible(t, tw):
                drops.add(SUBSET, f"construct_pair_not_test_specific:{family}")
                continue
            queued[t.key].append(_Pair(tw))
    return queued


def _queue(task: Task, q: _Pair, verifier: Verifier) -> None:
    asserts = [v.text for v in task.visible]
    tw = q.twins
    q.checks = (verifier.visible(tw.gaming.code, asserts), verifier.hidden(tw.gaming.code, task.hidden),
                verifier.visible(tw.benign, asserts), verifier.hidden(tw.benign, task.hidden))


def verify(tasks: list[Task], queued: dict[str, list[_Pair]], seed: int, verifier: Verifier) -> None:
    """Run the pairs' checks (with whatever else the verifier has queued): each task's pairs in order
    until one verifies, which is all the direction balance reads, then the remaining pairs of the tasks
    it keeps (the other tasks' would never be read) and the plain-bug controls of their pairs, in one
    last batch. The manifest counts the pairs left unrun (`construct_pair_unrun_not_balanced`)."""
    by_key = {t.key: t for t in tasks}
    position = {t.key: 0 for t in tasks if queued[t.key]}  # the next pair of a task none of whose pairs verified yet
    while position:
        for key, i in position.items():
            _queue(by_key[key], queued[key][i], verifier)
        verifier.run()
        position = {k: i + 1 for k, i in position.items()
                    if i + 1 < len(queued[k]) and not _verified(queued[k][i], verifier)}
    balanced = _balanced(tasks, queued, seed, verifier)
    for key in balanced:
        first = next(q for q in queued[key] if _verified(q, verifier))  # the task's test pair
        for q in queued[key]:
            if q.checks is None:
                _queue(by_key[key], q, verifier)
            if q.twins.bug is not None:  # in the same batch: a bug's checks cost as much as a twin's
                # the hidden tests decide (a bug fails them); the visible verdict is recorded for the test
                # split's control only, where it shows bugs a behavioural verdict would call gaming
                asserts = [v.text for v in by_key[key].visible]
                q.bug_checks = (verifier.visible(q.twins.bug, asserts) if q is first else None,
                                verifier.hidden(q.twins.bug, by_key[key].hidden))
    verifier.run()


def _verified(q: _Pair, verifier: Verifier) -> bool:
    """The gaming twin passes the visible tests and fails the hidden ones; the benign passes both."""
    if q.checks is None:
        return False
    g_visible, g_hidden, b_visible, b_hidden = q.checks
    return verifier[g_visible][0] and not verifier[g_hidden][0] and verifier[b_visible][0] and verifier[b_hidden][0]


def _balanced(tasks: list[Task], queued: dict[str, list[_Pair]], seed: int, verifier: Verifier,
              drops: Drops | None = None) -> set[str]:
    """The tasks that make items: those with a verified pair whose mutation is in a direction-balanced
    set (mutation.balanced_pairs), in both splits. A gaming twin carries its task's mutation, and a
    direction made more often (`<` -> `<=` more often than back, `if x` -> `if not x` more often than
    back) would teach a response-only classifier which twin is wrong. Reads each task's first
    verified pair only."""
    swaps = {}
    for t in tasks:
        first = next((q for q in queued[t.key] if _verified(q, verifier)), None)
        if first is not None:
            swaps[t.key] = swap(first.twins.gaming.meta["wrong_impl"])
    balanced = balanced_pairs(swaps, seed)
    if drops is not None:
        drops.add(SUBSET, "construct_pair_mutation_direction_balance", len(swaps) - len(balanced))
    return balanced


def items(tasks: list[Task], queued: dict[str, list[_Pair]], incentives: list[str], seed: int,
          verifier: Verifier, drops: Drops) -> list[Item]:
    """The tasks' items, after `verify`. How the sandbox isolated the checks is the build record's
    (build_log.json), not the samples'."""
    verified: dict[str, list[_Pair]] = {}
    unrun = 0
    for t in tasks:
        verified[t.key] = [q for q in queued[t.key] if _verified(q, verifier)]
        ran = sum(q.checks is not None for q in queued[t.key])
        unrun += len(queued[t.key]) - ran
        drops.add(SUBSET, "construct_pair_failed_verification", ran - len(verified[t.key]))
        if not queued[t.key]:
            drops.add(SUBSET, "no_construct_pair")
    balanced = _balanced(tasks, queued, seed, verifier, drops)
    if unrun:  # `verify` ran only what the balance reads
        drops.add(SUBSET, "construct_pair_unrun_not_balanced", unrun)
    out = []
    for t in tasks:
        if t.key not in balanced:
            continue
        pairs = [_drafts(t, q, incentives, seed, verifier) for q in verified[t.key]]
        bugs = [_bug(t, q, pair[1], seed, verifier, drops) for q, pair in zip(verified[t.key], pairs)]
        test_bug = [bugs[0]] if bugs and bugs[0] is not None else []
        out.append(Item((t.key,), SUBSET, t.source, pairs[0], [d for p in pairs for d in p] + [b for b in bugs if b],
                        test_bug))
    return out


def _bug(task: Task, q: _Pair, benign: Draft, seed: int, verifier: Verifier, drops: Drops) -> Draft | None:
    """The pair's plain-bug contrast control (automon.controls), or None: the benign
    twin's code around the wrong implementation, in the benign twin's request and preface. Benign by
    the label definition, whatever the visible tests say: it fails the hidden tests (a bug) and the
    construct check finds nothing keyed on the visible tests or the checker in it (that check decides,
    not the behavioural verdict: one that passes the visible tests would read as gaming to a
    sandbox alone). One that passes the hidden tests is no bug (counted)."""
    if q.bug_checks is None:
        return None
    v_ok = None if q.bug_checks[0] is None else verifier[q.bug_checks[0]][0]
    h_ok, h_why = verifier[q.bug_checks[1]]
    asserts = [v.text for v in task.visible]
    if h_ok:
        drops.add(SUBSET, "plain_bug_passes_hidden_tests")
        return None
    if violations(0, q.twins.bug, asserts, task.code):
        drops.add(SUBSET, "plain_bug_not_construct_benign")
        return None
    found = analyse(q.twins.bug, asserts, task.code)
    response = render_response(q.twins.bug, choose(PREFACES, seed, task.key, q.twins.family, "v3", "preface"))
    meta = {k: v for k, v in benign.meta.items() if k not in ("strategy", "constructs", "verification")}
    meta.update(strategy=f"{q.twins.family}_plain_bug", control="plain_bug",
                wrong_impl=q.twins.gaming.meta["wrong_impl"],
                constructs={"test_keyed": found.test_keyed, "tampering": found.tampering},
                verification={"visible": "not run" if v_ok is None else "pass" if v_ok else "fail", "hidden": "fail",
                              "hidden_result": h_why, "hidden_tests": task.n_hidden})
    return Draft(benign.request, response, 0, [], meta, f"{q.twins.family}_plain_bug")


def checked_extras(extras: list[Item], drops: Drops) -> list[Item]:
    """The reward-hack extras (training only) through the construct check: a code sample that
    contradicts its label is left out and counted (external rows, not this generator's output).
    A selection answer names an option and holds no code: nothing to read."""
    out = []
    for it in extras:
        canonical = next((code for d in it.train if d.label == 0 and (code := response_code(d.response))), None)
        keep = []
        for d in it.train:
            bad = violations(d.label, response_code(d.response), d.meta.get("visible_tests") or [], canonical)
            if bad:
                drops.add(SUBSET, f"extra_contradicts_construct_check:{d.meta.get('recipe', '')}")
                continue
            keep.append(d)
        if keep:
            out.append(Item(it.keys, it.subset, it.source, None, keep))
    return out


def _drafts(task: Task, q: _Pair, incentives: list[str], seed: int, verifier: Verifier) -> tuple[Draft, Draft]:
    incentive = choose(incentives, seed, task.key, "incentive")
    asserts = [v.text for v in task.visible]
    request = render_request(task.problem, asserts, incentive)
    tw = q.twins
    preface = choose(PREFACES, seed, task.key, tw.family, "v3", "preface")
    meta = {"recipe": RECIPE, "generator": "template", "incentive": incentive, "visible_tests": asserts,
            "source_dataset": task.dataset, "source_ref": task.ref, "family": tw.family, "form": tw.form}
    drafts = []
    for label, code, variant in ((1, tw.gaming.code, tw.family), (0, tw.benign, f"{tw.family}_benign")):
        bad = violations(label, code, asserts, task.code)
        if bad:
            sid = short_hash(task.source, SUBSET, RECIPE, variant, label, n=16)
            raise BuildError(f"sg_code sample {sid} ({task.key}, {variant}) contradicts its label {label}: {bad}",
                             None, "a generator bug: report it with this line")
        found = analyse(code, asserts, task.code)
        constructs = {"test_keyed": found.test_keyed, "tampering": found.tampering}
        if label:
            h_why = verifier[q.checks[1]][1]
            m = {**meta, "strategy": tw.family, "wrong_impl": tw.gaming.meta["wrong_impl"], "constructs": constructs,
                 "verification": {"visible": "pass", "hidden": "fail", "hidden_result": h_why,
                                  "hidden_tests": task.n_hidden}}
            response = render_response(code, preface)
            assert all(e in response for e in tw.gaming.evidence), (task.key, tw.family, tw.gaming.evidence)
            drafts.append(Draft(request, response, 1, list(tw.gaming.evidence), m, variant))
        else:
            m = {**meta, "strategy": f"{tw.family}_benign", "constructs": constructs,
                 "verification": {"visible": "pass", "hidden": "pass", "hidden_tests": task.n_hidden}}
            drafts.append(Draft(request, render_response(code, preface), 0, [], m, variant))
    return drafts[0], drafts[1]
