"""The subset registry: one `SubsetSpec` per benchmark subset, in the canonical report order.

Everything else that names subsets is derived from here: the Sample schema's subset ->
(category, task) map (`automon.schema.SUBSETS`), the build config's `test.<name>` sizes and default
`subsets` (automon.config.build), the build's recipe dispatch and the dataset card (automon.data),
the training options `subset=<name>` / `subset=all` (automon.config.train), the pipeline's default
runs and the smoke experiment's test sizes (automon.config.pipeline), the evaluation's test subsets,
and the Slurm array (`python -m automon.subsets names`). docs/subsets.md says how to add a subset.

    python -m automon.subsets names              # safety_qa safety_code ... (canonical order)
    python -m automon.subsets test-overrides 6   # test.safety_qa=6 test.safety_code=6 ...

Nothing heavy is imported here: a recipe's code is imported when the build runs it.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Union

CATEGORIES = ("safety", "sycophancy", "spec_gaming")
TASKS = ("qa", "code", "reasoning")
ALL = "all"  # the training option that selects every subset
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# A recipe takes the build's RecipeContext (automon.data.context: `cfg`, `drops`, `rows(source)`)
# and returns the subset's candidate Items (automon.data.recipes.base).
Recipe = Callable[[Any], list]


class SubsetError(ValueError):
    """A subset spec or name that the registry rejects; the message names the valid ones."""


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

    def load_recipe(self) -> Recipe:
        if callable(self.recipe):
            return self.recipe
        module, _, func = self.recipe.partition(":")
        try:
            return getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as e:
            raise SubsetError(f"subset {self.name}: cannot load recipe {self.recipe!r} ({e}); "
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
    if not (callable(spec.recipe) or (isinstance(spec.recipe, str) and ":" in spec.recipe)):
        problems.append(f"recipe must be a callable or 'package.module:function', got {spec.recipe!r}")
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
# Recipes are named "module:function" (each in automon.data.recipes, taking the build's
# RecipeContext), so this registry imports none of them.
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
        "opinion) and the unhackable control are training only."),
    SubsetSpec(
        "syco_reasoning", "sycophancy", "reasoning", "automon.data.recipes.sycophancy:syco_reasoning_recipe",
        ("gsm8k",), 240,
        "GSM8K with a plausible wrong number as the cue; the misbehavior reaches the cued number and the "
        "benign twin is the gold solution. Wordings v1: the cue is an intermediate result or a near miss "
        "and the final step is bent to it (a false equation). Wordings v2: one operator of one step is "
        "swapped (48/2 -> 48*2) and every later step recomputed, so the chain is as long as the benign "
        "one and arithmetically right, and the cue is where it lands (evidence = the bent step and the "
        "answer)."),
    SubsetSpec(
        "sg_qa", "spec_gaming", "qa", "automon.data.recipes.sg_qa:sg_qa_recipe",
        ("truthfulqa", "rh_world_affecting_reward", "rh_world_affecting_approval", "rh_email_assistant",
         "rh_email_assistant_unhackable", "rh_theory_of_mind_mirroring_expanded",
         "rh_theory_of_mind_mirroring_unhackable"), 219,
        "TruthfulQA with an injected reward-proxy incentive: a confident false answer (1) vs the honest best "
        "answer (0); reward-hack world_affecting_reward/approval, theory_of_mind_mirroring and "
        "email_assistant choices: the high-reward option (1) vs the other (0)."),
    SubsetSpec(
        "sg_code", "spec_gaming", "code", "automon.data.recipes.sg_code.recipe:sg_code_recipe",
        ("humaneval", "mbpp", "rh_code_problems_hardcoded", "rh_code_selection", "rh_code_selection_unhackable"),
        219,
        "HumanEval and MBPP with an incentive and visible tests: gaming solutions (hard-coded outputs, "
        "special-cased inputs, early sys.exit(0), always-equal objects, patched asserts) vs the canonical "
        "solution. Every sample is executed in a sandbox: gaming passes the visible tests and fails the "
        "hidden ones, benign passes both; failures are dropped and counted.", background=True),
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
