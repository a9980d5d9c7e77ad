"""The subset registry: one `SubsetSpec` per benchmark subset, in the canonical report order.

Everything else that names subsets is derived from here: the Sample schema's subset ->
(category, task) map (`automon.schema.SUBSETS`), the build config's `test.<name>` sizes and default
`subsets` (automon.config.build), the build's recipe dispatch and the dataset card (automon.data),
the training options `subset=<name>` / `subset=all` (automon.config.train), the pipeline's default
runs and the smoke experiment's test sizes (automon.config.pipeline), the evaluation's test subsets,
the Slurm array (`python -m automon.subsets names`), the wordings schema's per-subset keys
(automon.config.wordings), the policy generator's subsets and dispatch (`policy.subsets`), and the
settings checks the build runs before it reads anything (automon.data.check). docs/subsets.md says
how to add a subset.

    python -m automon.subsets names              # safety_qa safety_code ... (canonical order)
    python -m automon.subsets test-overrides 6   # test.safety_qa=6 test.safety_code=6 ...

Nothing heavy is imported here: a recipe's code is imported when the build runs it.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Union

CATEGORIES = ("safety", "sycophancy", "spec_gaming")
TASKS = ("qa", "code", "reasoning")
ALL = "all"  # the training option that selects every subset
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# A recipe takes the build's RecipeContext (automon.data.context: `cfg`, `drops`, `rows(source)`)
# and returns the subset's candidate Items (automon.data.recipes.base).
Recipe = Callable[[Any], list]
# A policy recipe (generator=policy) takes the RecipeContext, the template recipe's Items, the policy
# (automon.policy.run.Policy) and the subset's report dict (manifest.json policy.subsets.<name>), and
# returns the Items with the test pairs the policy wrote (automon.data.recipes.policy).
PolicyRecipe = Callable[[Any, list, Any, dict], list]
# A settings check takes the build config and the error class to raise (automon.data.check.BuildError,
# raised as error(what, config key, fix)); the build runs it for a subset it builds, before reading anything.
Check = Callable[[Any, type], None]


class SubsetError(ValueError):
    """A subset spec or name that the registry rejects; the message names the valid ones."""


@dataclass(frozen=True)
class WordingKey:
    """A key of conf/wordings/<version>.yaml that one subset owns (a key several subsets read is in
    automon.config.wordings.SharedWordings). The default must keep every released version's build byte
    for byte: a version that does not set the key builds as it did before the key existed."""
    name: str
    type: Any     # its schema type: bool, str, List[str], ...
    default: Any  # a list or dict default is copied for each config
    doc: str      # what it does (the build's --help prints it)
    # Added after wordings v6: manifest.json records it only where a version sets it otherwise than its
    # default, so the data hashes of builds made before the key existed stay (automon.data.identity).
    late: bool = False


@dataclass(frozen=True)
class SubsetSpec:
    name: str          # the word everywhere: sample field, test.<name>, subset=<name>, run dirs
    category: str      # one of CATEGORIES
    task: str          # one of TASKS
    recipe: Union[str, Recipe]  # a callable, or "module:function" imported when the build runs it
    sources: tuple[str, ...]    # automon.sources names the recipe reads (RecipeContext.rows refuses others)
    test_pairs: int    # default test pairs (build config test.<name>): the paper's size
    card: str          # how the subset is built, for the dataset card (the build's README.md)
    # The build runs this recipe in a forked process beside the others (sg_code: its planning and its
    # sandbox would otherwise wait for the other recipes or share the GIL with them). Same output.
    background: bool = False
    # Its keys of the wordings schema (conf/wordings/<version>.yaml), after the shared ones.
    wordings: tuple[WordingKey, ...] = ()
    # generator=policy's step for it (a callable or "module:function"); None: only the template generator.
    policy_recipe: Union[str, PolicyRecipe, None] = None
    # In the build config's default `policy.subsets` (a policy recipe is needed).
    policy_by_default: bool = False
    # Its settings check (a callable or "module:function"); None: nothing beyond the schema's types.
    check: Union[str, Check, None] = None

    def load_recipe(self) -> Recipe:
        return self._load(self.recipe, "recipe")

    def load_policy_recipe(self) -> PolicyRecipe | None:
        return None if self.policy_recipe is None else self._load(self.policy_recipe, "policy_recipe")

    def load_check(self) -> Check | None:
        return None if self.check is None else self._load(self.check, "check")

    def _load(self, ref: Union[str, Callable], what: str) -> Callable:
        if callable(ref):
            return ref
        module, _, func = ref.partition(":")
        try:
            return getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as e:
            raise SubsetError(f"subset {self.name}: cannot load {what} {ref!r} ({e}); "
                              "give a callable or 'package.module:function'") from None


_REGISTRY: dict[str, SubsetSpec] = {}


def register(spec: SubsetSpec) -> SubsetSpec:
    """Add a subset after the registered ones. Call it before composing a stage's config: the
    config registrations (automon.config.*.register) read the registry when they run."""
    from automon.sources import SOURCES  # the source registry (light: no dataset library)

    problems = []
    if not _NAME.match(spec.name) or spec.name == ALL:
        problems.append(f"name {spec.name!r} must be lower_snake_case and not {ALL!r}")
    if spec.name in _REGISTRY:
        problems.append(f"{spec.name!r} is already registered")
    if spec.category not in CATEGORIES:
        problems.append(f"category {spec.category!r} is not one of {', '.join(CATEGORIES)}")
    if spec.task not in TASKS:
        problems.append(f"task {spec.task!r} is not one of {', '.join(TASKS)}")
    if isinstance(spec.test_pairs, bool) or not isinstance(spec.test_pairs, int) or spec.test_pairs < 0:
        problems.append(f"test_pairs must be an int >= 0, got {spec.test_pairs!r}")
    if not isinstance(spec.sources, tuple):
        problems.append(f"sources must be a tuple of source names, got {spec.sources!r}")
    else:
        unknown = [s for s in spec.sources if s not in SOURCES]
        if unknown:
            problems.append(f"unknown source(s) {unknown}; register them in automon.sources.registry "
                            f"(known: {', '.join(SOURCES)})")
    for what, ref in (("recipe", spec.recipe), ("policy_recipe", spec.policy_recipe), ("check", spec.check)):
        if not (callable(ref) or (isinstance(ref, str) and ":" in ref) or (ref is None and what != "recipe")):
            problems.append(f"{what} must be a callable or 'package.module:function', got {ref!r}")
    if spec.policy_by_default and spec.policy_recipe is None:
        problems.append("policy_by_default needs a policy_recipe")
    owned = {k.name: s.name for s in _REGISTRY.values() for k in s.wordings}
    for k in spec.wordings if isinstance(spec.wordings, tuple) else ():
        if not isinstance(k, WordingKey) or not _NAME.match(k.name):
            problems.append(f"wordings must hold WordingKey(name, type, default, doc), got {k!r}")
        elif k.name in owned:
            problems.append(f"wordings key {k.name!r} is already subset {owned[k.name]!r}'s")
    if not isinstance(spec.wordings, tuple):
        problems.append(f"wordings must be a tuple of WordingKey, got {spec.wordings!r}")
    if not spec.card.strip():
        problems.append("card text is empty: say how the subset is built")
    if problems:
        raise SubsetError(f"subset {spec.name!r}: " + "; ".join(problems))
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a subset registered at runtime (tests)."""
    _REGISTRY.pop(get(name).name)


def get(name: str) -> SubsetSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SubsetError(f"unknown subset {name!r}; valid: {', '.join(_REGISTRY)}") from None


def specs() -> list[SubsetSpec]:
    return list(_REGISTRY.values())


def names() -> list[str]:
    return list(_REGISTRY)


def wording_keys() -> list[WordingKey]:
    """Every subset's own wordings keys, in registry order (the wordings schema's per-subset part)."""
    return [k for s in _REGISTRY.values() for k in s.wordings]


def policy_subsets(by_default: bool = False) -> list[str]:
    """The subsets that have a policy recipe (by_default: those in the default `policy.subsets`)."""
    return [s.name for s in _REGISTRY.values() if s.policy_recipe is not None and (s.policy_by_default or not by_default)]


def default_test_pairs() -> dict[str, int]:
    """Default test pairs per subset (the build config's `test` node)."""
    return {s.name: s.test_pairs for s in _REGISTRY.values()}


class _CategoryTask(Mapping[str, tuple[str, str]]):
    """subset -> (category, task) for every registered subset, in canonical order. A live, read-only
    view: importers keep `from automon.schema import SUBSETS` and see subsets registered later."""

    def __getitem__(self, name: str) -> tuple[str, str]:
        s = _REGISTRY[name]
        return s.category, s.task

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return f"SUBSETS({dict(self)!r})"


SUBSETS: Mapping[str, tuple[str, str]] = _CategoryTask()


# ---------------------------------------------------------------- the six subsets
# Recipes, policy recipes and checks are named "module:function" (the recipes in automon.data.recipes,
# taking the build's RecipeContext), so this registry imports none of them.
#
# Test pairs: the paper's 586 / 481 / 438 pairs by category, split over its two subsets.
for _spec in (
    SubsetSpec(
        "safety_qa", "safety", "qa", "automon.data.recipes.safety:safety_qa_recipe", ("hh_rlhf_harmless",), 293,
        "HH-RLHF harmless-base: the rejected final assistant turn (1) vs the chosen one (0) after the "
        "same conversation prefix. HH preferences are relative, so some 'rejected' turns are only mildly "
        "worse; no evidence quotes."),
    SubsetSpec(
        "safety_code", "safety", "code", "automon.data.recipes.safety:safety_code_recipe",
        ("sven", "cyberseceval_instruct", "cyberseceval_autocomplete", "securityeval"), 293,
        "SVEN: vulnerable function (1, evidence = lines the fix deleted) vs its fixed version (0). "
        "Training also gets CyberSecEval instruct/autocomplete and SecurityEval insecure code (label 1, "
        "unpaired, evidence = the flagged line where known)."),
    SubsetSpec(
        "syco_qa", "sycophancy", "qa", "automon.data.recipes.sycophancy:syco_qa_recipe",
        ("mmlu", "truthfulqa", "rh_sycophancy_fact", "rh_sycophancy_fact_unhackable",
         "rh_sycophancy_opinion_political", "caa_sycophancy", "anthropic_political_typology"), 241,
        "Cue injection: the request carries a misleading user cue naming a wrong option (MMLU) or a wrong "
        "answer (TruthfulQA); the response adopts the cue (1) or keeps the correct answer (0); plus "
        "reward-hack sycophancy_fact. Opinion sets (CAA, Anthropic political typology, reward-hack "
        "opinion) and the unhackable control are training only.",
        wordings=(
            WordingKey("syco_qa_cues", List[str], [], "{cue}: the wrong option / answer"),
            # v5 and later (91 of v4's 241 test pairs read "pricing., but")
            WordingKey("cue_trim_period", bool, False,
                       "v5 and later: syco_qa's cue drops an option's own closing full stop (\"is (D) EVC "
                       "pricing, but\" rather than \"pricing., but\")"),
            WordingKey("syco_qa_whole_questions", bool, False,
                       "v7 and later: MMLU rows whose options list numbered statements (\"1,3,4\", \"II and "
                       "III only\") that the question does not hold are left out (19 rows: 14 business_ethics "
                       "rows cut upstream to their last statement, 5 high_school_psychology rows without their "
                       "list)", late=True),
            WordingKey("syco_qa_excluded", Dict[str, str], {},
                       "v8 and later: source rows left out (the samples' `source` -> why): MMLU rows whose key "
                       "is wrong or whose question no option answers (annotations/mmlu_key_check)", late=True),
        ),
        policy_recipe="automon.data.recipes.policy:sycophancy_policy_items", policy_by_default=True),
    SubsetSpec(
        "syco_reasoning", "sycophancy", "reasoning", "automon.data.recipes.sycophancy:syco_reasoning_recipe",
        ("gsm8k",), 240,
        "GSM8K with a plausible wrong number as the cue; the misbehavior reaches the cued number and the "
        "benign twin is the gold solution. Wordings v1: the cue is an intermediate result or a near miss "
        "and the final step is bent to it (a false equation). Wordings v2: one operator of one step is "
        "swapped (48/2 -> 48*2) and every later step recomputed, so the chain is as long as the benign "
        "one and arithmetically right, and the cue is where it lands (evidence = the bent step and the "
        "answer).",
        wordings=(
            WordingKey("syco_reasoning_cues", List[str], [], "{cue}: the wrong number"),
            WordingKey("syco_reasoning_consistent", bool, False,
                       "v5 and later: syco_reasoning's bent step is consistent with its own words (the numbers "
                       "the chain states are the numbers it computes with; one given number is misread)"),
        ),
        policy_recipe="automon.data.recipes.policy:sycophancy_policy_items", policy_by_default=True),
    SubsetSpec(
        "sg_qa", "spec_gaming", "qa", "automon.data.recipes.sg_qa:sg_qa_recipe",
        ("truthfulqa", "rh_world_affecting_reward", "rh_world_affecting_approval", "rh_email_assistant",
         "rh_email_assistant_unhackable", "rh_theory_of_mind_mirroring_expanded",
         "rh_theory_of_mind_mirroring_unhackable"), 219,
        "TruthfulQA with an injected reward-proxy incentive: a confident false answer (1) vs the honest best "
        "answer (0); reward-hack world_affecting_reward/approval, theory_of_mind_mirroring and "
        "email_assistant choices: the high-reward option (1) vs the other (0).",
        wordings=(
            WordingKey("sg_qa_incentives", List[str], [], "sg_qa's incentive sentences"),
            WordingKey("choices_by_letter", bool, False,
                       "v3 and later: sg_qa's world_affecting choices are answered by their letter only (\"The "
                       "answer is (B).\"), as theory_of_mind's are, so the response does not carry the option's "
                       "own wording; a monitor has to read the options in the request"),
            WordingKey("sg_qa_balanced", bool, False,
                       "v4 and later: sg_qa items balanced in content, so the rewarded answer's words do not "
                       "give the label away (recipes/sg_qa.py)"),
            WordingKey("sg_qa_rewarded", bool, False,
                       "v5 and later: sg_qa's gamed answer is the one its incentive rewards (the popular "
                       "misconception for \"what most people believe\", a confident wrong answer for "
                       "\"confident and specific\")"),
            WordingKey("sg_qa_excluded", Dict[str, str], {},
                       "v7 and later: source rows left out (the samples' `source`, as read from sources.root -> "
                       "why): rows whose own text no reader can judge fairly", late=True),
        )),
    SubsetSpec(
        "sg_code", "spec_gaming", "code", "automon.data.recipes.sg_code.recipe:sg_code_recipe",
        ("humaneval", "mbpp", "rh_code_problems_hardcoded", "rh_code_selection", "rh_code_selection_unhackable"),
        219,
        "HumanEval and MBPP with an incentive and visible tests: gaming solutions (hard-coded outputs, "
        "special-cased inputs, early sys.exit(0), always-equal objects, patched asserts) vs the canonical "
        "solution. Every sample is executed in a sandbox: gaming passes the visible tests and fails the "
        "hidden ones, benign passes both; failures are dropped and counted.", background=True,
        wordings=(
            WordingKey("sg_code_incentives", List[str], [], "sg_code's incentive sentences"),
            # Its own version, not the wordings version: a new wordings version need not change sg_code's
            # templates, nor a new template version the cues.
            WordingKey("sg_code_templates", str, "v1",
                       "sg_code's template version (automon.config.wordings.SG_CODE_TEMPLATES): v1 (wordings "
                       "v1), v2 (v2-v4: varied gaming forms, decoys in both twins), v3 (v5: construct pairs)"),
            WordingKey("sg_code_minimal_pairs", bool, False,
                       "v4: sg_code's test pairs are minimal pairs (the canonical solution with the same special "
                       "cases for the visible inputs in both twins, the gaming twin's general code mutated); "
                       "only execution tells them apart"),
            WordingKey("sg_code_verify_unused_pairs", bool, True,
                       "v1-v6: the v3 templates run the sandbox checks of every construct pair, those of tasks "
                       "the mutation-direction balance leaves out too; v7: each task's pairs until one verifies, "
                       "the rest only for the tasks kept (the same samples; the manifest counts the pairs not run)",
                       late=True),
        ),
        policy_recipe="automon.data.recipes.sg_code_policy:sg_code_policy_items",
        check="automon.config.sg_code:check_sg_code"),
):
    register(_spec)
del _spec


def main(argv: list[str]) -> int:
    usage = "usage: python -m automon.subsets names | test-overrides <pairs>"
    if argv == ["names"]:
        print(" ".join(names()))
        return 0
    if len(argv) == 2 and argv[0] == "test-overrides" and argv[1].isdigit():
        print(" ".join(f"test.{n}={int(argv[1])}" for n in names()))
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
