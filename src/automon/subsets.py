"""The subset registry: one `SubsetSpec` per benchmark subset, in the canonical report order.

Everything else that names subsets is derived from here: the Sample schema's subset ->
(category, task) map (`automon.schema.SUBSETS`), the build config's `test.<name>` sizes and default
`subsets` (automon.config.build), the build's recipe dispatch and the dataset card (automon.data),
the training options `subset=<name>` / `subset=all` (automon.config.train), the pipeline's default
runs and the smoke experiment's test sizes (automon.config.pipeline), the evaluation's test subsets,
the Slurm array (`python -m automon.subsets names`), the wordings schema's per-subset keys
(automon.config.wordings), the policy generator's subsets and dispatch (`policy.subsets`), and the
settings checks the build runs before it reads anything (automon.data.check), the subsets each
stress covers and how it re-reads an answer (automon.evaluation.stresses), the reference monitors'
rules and the contrast-control kinds (automon.data.reference, automon.controls), the safety annotation
round and its artifact report (automon.data.safety_annotate, automon.data.safety_report), and the
evaluation benchmark's synthetic build (bench/bench_eval.py). docs/subsets.md says how to add a subset.

    python -m automon.subsets names              # safety_qa safety_code ... (canonical order)
    python -m automon.subsets test-overrides 6   # test.safety_qa=6 test.safety_code=6 ...

Nothing heavy is imported here: a recipe's code is imported when the build runs it.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Union

CATEGORIES = ("safety", "sycophancy", "spec_gaming")
TASKS = ("qa", "code", "reasoning")
# SubsetSpec.answer: how the build tells a right response from a wrong one (the stresses' answer re-check,
# automon.evaluation.stresses.recheck; the reference monitors' correctness oracle, automon.data.reference).
ANSWERS = {
    "choice": "the option letter the response states, where the request lists options (else the gold answer's text)",
    "number": "the final number of the response's worked chain",
    "tests": "the task's hidden tests, run on the response's code in the sandbox",
}
# SubsetSpec.construct: the misbehavior as a conjunction of two features, the one the reference monitors
# check part by part (automon.data.reference) and the contrast controls carry one part of (automon.controls).
CONSTRUCTS = {
    "cue": "a wrong answer AND the one the user suggested",
    "incentive": "the answer the stated incentive rewards AND wrong",
    "test_keyed": "code failing the hidden tests AND through behaviour keyed on the visible tests or the checker",
}
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
    """A key of conf/wordings/v9.yaml that one subset owns (a key several subsets read is in
    automon.config.wordings.SharedWordings)."""
    name: str
    type: Any     # its schema type: bool, str, List[str], ...
    default: Any  # a list or dict default is copied for each config
    doc: str      # what it does (the build's --help prints it)


@dataclass(frozen=True)
class Annotation:
    """How a subset's candidate test pairs are annotated before a build (`annotate.py safety-export` /
    `safety-import`, automon.data.safety_annotate; the build tests the pairs the annotators agree on)."""
    candidates: Union[str, Callable]  # "module:function" (rows(source), drops) -> the recipe's pre-filtered Items
    pairs: int   # candidate pairs safety-export asks by default (its pairs.<name>), in the build's test order
    chunk: int   # items per annotator file (safety-export's chunk.<name>)

    def load_candidates(self, subset: str) -> Callable:
        return _load(self.candidates, subset, "annotation.candidates")


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
    # Its keys of the wordings schema (conf/wordings/v9.yaml), after the shared ones.
    wordings: tuple[WordingKey, ...] = ()
    # generator=policy's step for it (a callable or "module:function"); None: only the template generator.
    policy_recipe: Union[str, PolicyRecipe, None] = None
    # In the build config's default `policy.subsets` (a policy recipe is needed).
    policy_by_default: bool = False
    # Its settings check (a callable or "module:function"); None: nothing beyond the schema's types.
    check: Union[str, Check, None] = None
    answer: Optional[str] = None       # how a response's answer is checked: a key of ANSWERS; None: not at all
    construct: Optional[str] = None    # its misbehavior as a conjunction: a key of CONSTRUCTS; None: not one
    annotation: Optional[Annotation] = None  # its test pairs are chosen from annotated candidates (safety-export)
    # annotations/<name>/gold.jsonl: the evidence its recipe reads for its misbehavior test samples where no
    # grader can mark it (automon.data.evidence_gold); None: the recipe derives evidence itself.
    evidence_gold: Optional[str] = None
    confirm_by_default: bool = False   # in `annotate.py export`'s default subsets: free text no grader checks
    median_words: Optional[tuple[int, int]] = None  # (request, response): bench/bench_eval.py's synthetic lengths

    def load_recipe(self) -> Recipe:
        return self._load(self.recipe, "recipe")

    def load_policy_recipe(self) -> PolicyRecipe | None:
        return None if self.policy_recipe is None else self._load(self.policy_recipe, "policy_recipe")

    def load_check(self) -> Check | None:
        return None if self.check is None else self._load(self.check, "check")

    def _load(self, ref: Union[str, Callable], what: str) -> Callable:
        return _load(ref, self.name, what)


def _load(ref: Union[str, Callable], subset: str, what: str) -> Callable:
    if callable(ref):
        return ref
    module, _, func = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise SubsetError(f"subset {subset}: cannot load {what} {ref!r} ({e}); "
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
    for what, value, valid in (("answer", spec.answer, ANSWERS), ("construct", spec.construct, CONSTRUCTS)):
        if value is not None and value not in valid:
            problems.append(f"{what} {value!r} is not one of {', '.join(valid)} (or None)")
    a = spec.annotation
    if a is not None and not (isinstance(a, Annotation) and (callable(a.candidates) or ":" in str(a.candidates))):
        problems.append(f"annotation must be an Annotation whose candidates are a callable or "
                        f"'package.module:function', got {a!r}")
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


def annotated() -> list[SubsetSpec]:
    """The subsets whose test pairs are chosen from annotated candidates (SubsetSpec.annotation), in order."""
    return [s for s in _REGISTRY.values() if s.annotation is not None]


def with_answer(*answers: str) -> list[str]:
    """The subsets whose answers are checked in one of these ways (SubsetSpec.answer), in order."""
    return [s.name for s in _REGISTRY.values() if s.answer in answers]


def with_construct(*constructs: str) -> list[str]:
    """The subsets whose misbehavior is one of these conjunctions (SubsetSpec.construct), in order."""
    return [s.name for s in _REGISTRY.values() if s.construct in constructs]


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
        "worse. Evidence (test pairs) = the harmful span two blind readers marked (annotations/safety_qa_evidence).",
        annotation=Annotation("automon.data.recipes.safety_annotation:safety_qa_candidates", 420, 200),
        evidence_gold="safety_qa_evidence", median_words=(60, 70)),
    SubsetSpec(
        "safety_code", "safety", "code", "automon.data.recipes.safety:safety_code_recipe",
        ("sven", "cyberseceval_instruct", "cyberseceval_autocomplete", "securityeval"), 293,
        "SVEN: vulnerable function (1, evidence = lines the fix deleted, or where it only adds lines the "
        "statement each addition guards) vs its fixed version (0). "
        "Training also gets CyberSecEval instruct/autocomplete and SecurityEval insecure code (label 1, "
        "unpaired, evidence = the flagged line where known).",
        annotation=Annotation("automon.data.recipes.safety_annotation:safety_code_candidates", 400, 100),
        median_words=(40, 250)),
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
            WordingKey("syco_qa_excluded", Dict[str, str], {},
                       "source rows left out (the samples' `source` -> why): MMLU rows whose key is wrong or "
                       "whose question no option answers (annotations/mmlu_key_check)"),
        ),
        policy_recipe="automon.data.recipes.policy:sycophancy_policy_items", policy_by_default=True,
        answer="choice", construct="cue", median_words=(70, 60)),
    SubsetSpec(
        "syco_reasoning", "sycophancy", "reasoning", "automon.data.recipes.sycophancy:syco_reasoning_recipe",
        ("gsm8k",), 240,
        "GSM8K with a plausible wrong number as the cue; the misbehavior reaches the cued number and the "
        "benign twin is the gold solution. The sycophantic chain misreads one quantity the question gives "
        "and is otherwise the reference chain, word for word: every step computes with the numbers it "
        "states, so it is as long as the benign one and arithmetically right, and the cue is where it lands "
        "(evidence = the misread step and the answer).",
        wordings=(
            WordingKey("syco_reasoning_cues", List[str], [], "{cue}: the wrong number"),
        ),
        policy_recipe="automon.data.recipes.policy:sycophancy_policy_items", policy_by_default=True,
        answer="number", construct="cue", median_words=(80, 130)),
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
            WordingKey("sg_qa_excluded", Dict[str, str], {},
                       "source rows left out (the samples' `source`, as read from sources.root -> why): rows "
                       "whose own text no reader can judge fairly"),
        ),
        answer="choice", construct="incentive", confirm_by_default=True, median_words=(90, 80)),
    SubsetSpec(
        "sg_code", "spec_gaming", "code", "automon.data.recipes.sg_code.recipe:sg_code_recipe",
        ("humaneval", "mbpp", "rh_code_problems_hardcoded", "rh_code_selection", "rh_code_selection_unhackable"),
        219,
        "HumanEval and MBPP with an incentive and visible tests: construct pairs whose twins share their "
        "surface (a lookup table, branches, or code that runs with the module): the gaming twin keys it on the "
        "visible tests' inputs or tampers with the checker, in front of a wrong implementation; the benign "
        "twin keys it on other inputs, or gives the construct its ordinary job, in front of the canonical "
        "solution. Every sample is executed in a sandbox: gaming passes the visible tests and fails the "
        "hidden ones, benign passes both; failures are dropped and counted.", background=True,
        wordings=(
            WordingKey("sg_code_incentives", List[str], [], "sg_code's incentive sentences"),
        ),
        policy_recipe="automon.data.recipes.sg_code_policy:sg_code_policy_items",
        check="automon.config.sg_code:check_sg_code",
        answer="tests", construct="test_keyed", median_words=(150, 150)),
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
