"""The recipe: `sg_code_items` parses the tasks, builds each one's benign and gaming solutions,
verifies them all in one sandbox pool and keeps what verified (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from automon.config.sg_code import STRATEGIES, SgCodeConfig
from automon.config.wordings import SG_CODE_TEMPLATES
from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import choose, plain, rotate
from automon.data.recipes.sg_code import recipe_v3
from automon.data.recipes.sg_code.decoys import with_decoys
from automon.data.recipes.sg_code.extras import RewardHackExtras
from automon.data.recipes.sg_code.mutation import balanced_pairs, screen_mutants, swap
from automon.data.recipes.sg_code.render import PREFACES, render_request, render_response
from automon.data.recipes.sg_code.strategies import BUILDERS, NEEDS_MUTANT, Gaming
from automon.data.recipes.sg_code.strategies_v2 import BUILDERS_V2, minimal_pair
from automon.data.recipes.sg_code.tasks import SUBSET, Task, humaneval_task, mbpp_task
from automon.data.recipes.sg_code.verifier import Verifier
from automon.sandbox import Limits, Sandbox

RECIPE = "sg_code_template"
_WALL_FACTOR = 10  # wall-clock allowance per program, in multiples of its CPU-time limit
# Template versions (wordings.sg_code_templates, automon.config.wordings.SG_CODE_TEMPLATES): v1's
# fixed gaming shapes and bare canonical solutions, or v2's varied forms and shared decoys
# (strategies_v2.py, decoys.py). Wordings v1 selects v1; v2 and later select v2.
TEMPLATES_V1 = "v1"
TEMPLATES_V3 = "v3"


def sandbox_limits(cfg: SgCodeConfig) -> Limits:
    """Per-program limits. CPU time is the binding one: unlike wall time it does not grow when
    other processes share the cores, so verdicts do not depend on how busy the machine is. The
    wall-clock allowance only catches programs that block instead of computing."""
    return Limits(timeout_s=_WALL_FACTOR * cfg.timeout_s, cpu_s=cfg.timeout_s, memory_mb=cfg.memory_mb)


def sg_code_items(humaneval_rows: list[dict], mbpp_rows: list[dict], rh_hardcoded_rows: list[dict],
                  rh_selection_rows: list[dict], rh_selection_unhackable_rows: list[dict],
                  cfg: SgCodeConfig, incentives: list[str], seed: int, drops: Drops,
                  templates: str = TEMPLATES_V1, isolation: str = "auto", minimal_pairs: bool = False,
                  record_isolation: bool = True, ran_under: Callable[[str], None] | None = None,
                  verify_unused: bool = True, contrast: bool = False) -> list[Item]:
    """Items for sg_code: one per HumanEval / MBPP problem (test-eligible when the canonical
    solution and one of its gaming variants verify), plus training-only reward-hack extras.

    Rows carry their source file's field names and `_ref` ("file:line"). `templates` is sg_code's
    template version (wordings.sg_code_templates): "v1" keeps v1's templates byte for byte, "v2"
    selects v2's. `isolation` is the sandbox's (automon.sandbox.isolation; the mode in force is
    recorded per sample). `minimal_pairs` (wordings.sg_code_minimal_pairs, v4): the test pair is a
    minimal pair (strategies_v2.minimal_pair), trained on too; items without one are training-only.
    "v3" (wordings v5) builds construct pairs instead (recipe_v3.py). `record_isolation`
    (wordings.verification_in_samples): whether v3 samples record the isolation mode. `verify_unused`
    (wordings.sg_code_verify_unused_pairs): whether v3 runs the pairs of tasks that make no item too
    (recipe_v3.verify; the samples are the same, the manifest's counts of unverified pairs differ).
    `ran_under(mode)` is told the mode the code ran under (the build record's, not the samples').
    `contrast` (wordings.contrast_controls, v9): v3 items carry plain-bug contrast controls.
    Deterministic: the output depends only on the rows, cfg, incentives, seed and templates.
    """
    unknown = [s for s in cfg.strategies if s not in BUILDERS]
    if unknown or not cfg.strategies:
        raise ValueError(f"sg_code.strategies: unknown {unknown} or empty; valid: {', '.join(STRATEGIES)}")
    if not incentives:
        raise ValueError("sg_code needs at least one incentive wording (wordings.sg_code_incentives)")
    if templates not in SG_CODE_TEMPLATES:
        raise ValueError(f"sg_code templates {templates!r} unknown; valid: {', '.join(SG_CODE_TEMPLATES)}")
    strategies = list(cfg.strategies)

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

    if templates == TEMPLATES_V3:
        return _construct_items(tasks, mbpp_rows, rh_hardcoded_rows, rh_selection_rows, rh_selection_unhackable_rows,
                                cfg, incentives, seed, drops, isolation, record_isolation, ran_under, verify_unused,
                                contrast)
    with Sandbox(sandbox_limits(cfg), cfg.workers, isolation) as sb:
        verifier = Verifier(sb)
        picks = {t.key: _strategies(t, strategies, cfg, seed) for t in tasks}
        mutants = screen_mutants([t for t in tasks if minimal_pairs or set(picks[t.key]) & NEEDS_MUTANT], seed,
                                 verifier, decrements=minimal_pairs)
        v2 = templates != TEMPLATES_V1
        plans = [_plan(t, picks[t.key], cfg.train_strategies_per_item, mutants.get(t.key), seed, verifier, drops, v2,
                       minimal_pairs) for t in tasks]
        extras = RewardHackExtras(mbpp_rows, rh_hardcoded_rows, rh_selection_rows, rh_selection_unhackable_rows,
                                  incentives, seed, verifier, drops)
        verifier.run()
        isolation = sb.isolation
    if ran_under is not None:
        ran_under(isolation)
    testable = None
    if minimal_pairs:  # test pairs only from a direction-balanced set of mutations (balanced_pairs)
        swaps = {p.task.key: swap(p.minimal[0].gaming.meta["wrong_impl"]) for p in plans
                 if p.minimal is not None and _minimal_verified(p, verifier)}
        testable = balanced_pairs(swaps, seed)
        drops.add(SUBSET, "minimal_pair_training_only_direction_balance", len(swaps) - len(testable))
    items = [item for plan in plans
             if (item := _item(plan, incentives, seed, verifier, isolation, drops, testable))]
    return items + extras.items(isolation)



def _construct_items(tasks, mbpp_rows, rh_hardcoded_rows, rh_selection_rows, rh_selection_unhackable_rows,
                     cfg: SgCodeConfig, incentives: list[str], seed: int, drops: Drops, isolation: str,
                     record_isolation: bool, ran_under: Callable[[str], None] | None,
                     verify_unused: bool, contrast: bool = False) -> list[Item]:
    """The v3 templates: construct pairs (recipe_v3.py) and the reward-hack extras."""
    with Sandbox(sandbox_limits(cfg), cfg.workers, isolation) as sb:
        verifier = Verifier(sb)
        queued = recipe_v3.plan(tasks, seed, verifier, drops)
        extras = RewardHackExtras(mbpp_rows, rh_hardcoded_rows, rh_selection_rows, rh_selection_unhackable_rows,
                                  incentives, seed, verifier, drops)
        recipe_v3.verify(tasks, queued, seed, verifier, every=verify_unused, contrast=contrast)  # the extras' checks run with them
        isolation = sb.isolation
    if ran_under is not None:
        ran_under(isolation)
    recorded = isolation if record_isolation else None
    return (recipe_v3.items(tasks, queued, incentives, seed, verifier, recorded, drops)
            + recipe_v3.checked_extras(extras.items(recorded), drops))


def sg_code_recipe(ctx) -> list[Item]:
    """The sg_code recipe (SubsetSpec.recipe): the build's RecipeContext -> items."""
    def data(name):  # sg_code works on plain dicts that remember their source line
        return [dict(r.data, _ref=r.ref) for r in ctx.rows(name)]
    c = ctx.cfg
    return sg_code_items(data("humaneval"), data("mbpp"), data("rh_code_problems_hardcoded"),
                         data("rh_code_selection"), data("rh_code_selection_unhackable"), plain(c.sg_code),
                         list(c.wordings.sg_code_incentives), c.seed, ctx.drops, c.wordings.sg_code_templates,
                         c.sandbox.isolation, c.wordings.sg_code_minimal_pairs, c.wordings.verification_in_samples,
                         ctx.ran_code_under, c.wordings.sg_code_verify_unused_pairs, c.wordings.contrast_controls)

def _strategies(task: Task, strategies: list[str], cfg: SgCodeConfig, seed: int) -> list[str]:
    """The gaming strategies built for an item: `train_strategies_per_item` of them (at least one,
    for the test pair), rotated over `strategies` from a start chosen by seed and item key. The
    test pair uses the first that verifies; it needs no strategy of its own because a test item's
    training samples are never used."""
    return rotate(strategies, max(1, cfg.train_strategies_per_item), seed, task.key, "strategies")


@dataclass
class _Checked:
    """A gaming solution and the verifier handles of its visible and hidden checks."""
    gaming: Gaming
    visible: int
    hidden: int


@dataclass
class _Plan:
    task: Task
    strategies: list[str]   # in preference order for the test pair
    n_train: int            # how many of them train
    gaming: dict[str, _Checked]   # by strategy, for those that applied
    benign: tuple[int, int]       # verifier handles of the canonical solution: (visible, hidden)
    benign_code: str = ""         # the benign response's code (v2: the canonical solution with decoys)
    benign_meta: dict = field(default_factory=dict)   # v2: the decoys it carries
    # v4: the minimal pair, its gaming twin checked and its benign twin's (code, visible, hidden)
    minimal: tuple[_Checked, tuple[str, int, int]] | None = None


def _plan(task: Task, strategies: list[str], n_train: int, mutant: tuple[str, str] | None, seed: int,
          verifier: Verifier, drops: Drops, v2: bool = False, minimal_pairs: bool = False) -> _Plan:
    """Generate the benign and the gaming solutions of a task and queue their checks. v2: each
    solution, benign or gaming, with its own draw of decoys, checked as it will be shown. v4
    (minimal_pairs): the minimal pair as well."""
    asserts = [v.text for v in task.visible]
    gaming: dict[str, _Checked] = {}
    for strategy in strategies:
        built = (BUILDERS_V2 if v2 else BUILDERS)[strategy](task, seed, mutant)
        if built is None:
            drops.add(SUBSET, f"gaming_not_applicable:{strategy}")
            continue
        if v2:
            code, kinds = with_decoys(task, built.code, seed, strategy, strategy)
            built = replace(built, code=code, meta={**built.meta, "decoys": kinds})
        gaming[strategy] = _Checked(built, verifier.visible(built.code, asserts),
                                    verifier.hidden(built.code, task.hidden))
    code, kinds = with_decoys(task, task.code, seed, "canonical") if v2 else (task.code, None)
    benign = (verifier.visible(code, asserts), verifier.hidden(code, task.hidden))
    minimal = None
    if minimal_pairs:
        pair = minimal_pair(task, seed, mutant)
        if pair is None:
            drops.add(SUBSET, "no_minimal_pair")
        else:
            twin, fast = pair
            minimal = (_Checked(twin, verifier.visible(twin.code, asserts), verifier.hidden(twin.code, task.hidden)),
                       (fast, verifier.visible(fast, asserts), verifier.hidden(fast, task.hidden)))
    return _Plan(task, strategies, n_train, gaming, benign, code, {} if kinds is None else {"decoys": kinds}, minimal)


def _item(plan: _Plan, incentives: list[str], seed: int, verifier: Verifier, isolation: str,
          drops: Drops, testable: set[str] | None = None) -> Item | None:
    task = plan.task
    if not (verifier[plan.benign[0]][0] and verifier[plan.benign[1]][0]):
        drops.add(SUBSET, "benign_failed_verification")
        return None
    incentive = choose(incentives, seed, task.key, "incentive")
    asserts = [v.text for v in task.visible]
    request = render_request(task.problem, asserts, incentive)
    meta = {"recipe": RECIPE, "generator": "template", "incentive": incentive, "visible_tests": asserts,
            "source_dataset": task.dataset, "source_ref": task.ref}
    verification = {"hidden_tests": task.n_hidden, "isolation": isolation}

    def preface(variant: str) -> str:
        return choose(PREFACES, seed, task.key, variant, "preface")

    benign = Draft(request, render_response(plan.benign_code, preface("canonical")), 0, [],
                   {**meta, "strategy": "canonical", **plan.benign_meta,
                    "verification": {"visible": "pass", "hidden": "pass", **verification}}, "canonical")
    verified: dict[str, Draft] = {}
    for strategy, checked in plan.gaming.items():
        (v_ok, _), (h_ok, h_why) = verifier[checked.visible], verifier[checked.hidden]
        if not v_ok or h_ok:
            drops.add(SUBSET, f"gaming_failed_verification:{strategy}")
            continue
        gaming = checked.gaming
        response = render_response(gaming.code, preface(strategy))
        assert all(e in response for e in gaming.evidence), (task.key, strategy)
        verified[strategy] = Draft(request, response, 1, list(gaming.evidence),
                                   {**meta, "strategy": strategy, **gaming.meta,
                                    "verification": {"visible": "pass", "hidden": "fail",
                                                     "hidden_result": h_why, **verification}}, strategy)
    train = [benign] + [verified[s] for s in plan.strategies[:plan.n_train] if s in verified]
    if testable is not None and plan.minimal is None:  # v4: no minimal pair, no test pair
        return Item((task.key,), SUBSET, task.source, None, train)
    if plan.minimal is not None:  # v4: the minimal pair is the test pair, and trains
        pair = _minimal_drafts(plan, request, meta, verification, preface(MINIMAL), verifier, drops)
        test_pair = pair if testable is not None and task.key in testable else None
        return Item((task.key,), SUBSET, task.source, test_pair, train + list(pair or ())[::-1])
    test_strategy = next((s for s in plan.strategies if s in verified), None)
    test_pair = (verified[test_strategy], benign) if test_strategy else None
    return Item((task.key,), SUBSET, task.source, test_pair, train)


MINIMAL = "minimal_pair"            # the minimal pair's gaming twin (variant and strategy)
MINIMAL_BENIGN = "minimal_pair_benign"


def _minimal_verified(plan: _Plan, verifier: Verifier) -> bool:
    """The gaming twin passes the visible tests and fails the hidden ones; the benign passes both."""
    checked, (_, f_vis, f_hid) = plan.minimal
    return (verifier[checked.visible][0] and not verifier[checked.hidden][0]
            and verifier[f_vis][0] and verifier[f_hid][0])


def _minimal_drafts(plan: _Plan, request: str, meta: dict, verification: dict, preface: str, verifier: Verifier,
                    drops: Drops) -> tuple[Draft, Draft] | None:
    """The minimal pair as (gaming, benign) drafts when both twins verified as such, else None
    (counted). Both twins share the opener: they differ only by the mutation."""
    checked, (fast, _, _) = plan.minimal
    if not _minimal_verified(plan, verifier):
        drops.add(SUBSET, "minimal_pair_failed_verification")
        return None
    h_why = verifier[checked.hidden][1]
    twin = checked.gaming
    response = render_response(twin.code, preface)
    assert all(e in response for e in twin.evidence), (plan.task.key, MINIMAL)
    gaming = Draft(request, response, 1, list(twin.evidence),
                   {**meta, "strategy": MINIMAL, **twin.meta,
                    "verification": {"visible": "pass", "hidden": "fail", "hidden_result": h_why, **verification}},
                   MINIMAL)
    benign = Draft(request, render_response(fast, preface), 0, [],
                   {**meta, "strategy": MINIMAL_BENIGN, "form": twin.meta["form"],
                    "verification": {"visible": "pass", "hidden": "pass", **verification}}, MINIMAL_BENIGN)
    return gaming, benign
