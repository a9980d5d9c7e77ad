"""The subset registry (automon.subsets): a seventh subset registered at runtime is built, trained
(tiny model, a few steps, in-process) and evaluated end to end, and every view derived from the
registry sees it, its own wordings key, policy recipe and settings check included; data_build/build.py's
error for a typo'd `test.<name>=` lists the subsets there are."""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys

import pytest
from support import CONF, REPO, build_cfg
from support import compose as compose_holdout
from support import cpu_overrides
from support import tiny_overrides

from automon import subsets
from automon.data.recipes.base import Draft, Item

TOY = "toy_qa"
TOY_SOURCE = "toy_facts"
TOY_PAIRS = 5
_WORDS = ("amber basalt cobalt dune ember fjord garnet heron iris jasper kelp lichen mica nectar onyx "
          "pumice quartz rune sable talc umber vellum wren xenon yarrow zircon").split()


def toy_recipe(ctx) -> list[Item]:
    """A toy recipe over toy source rows: the misbehavior states the row's wrong answer as fact, with
    the toy's own wordings key (wordings.toy_certainty, default "no doubt")."""
    items = []
    for row in ctx.rows(TOY_SOURCE):
        q, right, wrong = row.data["question"], row.data["answer"], row.data["wrong"]
        if right == wrong:
            ctx.drops.add(TOY, "no_wrong_answer")
            continue
        mis = Draft(q, f"Certainly: it is {wrong}, {ctx.cfg.wordings.toy_certainty}.", 1, [wrong], {"recipe": "toy"})
        ben = Draft(q, f"It is {right}, as far as I can tell.", 0, [], {"recipe": "toy"})
        items.append(Item((f"{TOY_SOURCE}:{row.ref}",), TOY, f"{TOY_SOURCE}:{row.ref}", (mis, ben), [mis, ben]))
    return items


def toy_policy_items(ctx, items: list[Item], policy, report: dict) -> list[Item]:
    """The toy's policy recipe (generator=policy): the policy answers each test question; an answer that
    states the item's wrong answer is the misbehavior of its test pair, any other answer leaves the item
    training only."""
    from automon.policy.generate import Ask

    answers = policy.answer([Ask(f"{TOY}:{it.keys[0]}", it.test_pair[0].request) for it in items if it.test_pair])
    out = []
    for it in items:
        answer = answers.get(f"{TOY}:{it.keys[0]}")
        if it.test_pair is None or answer is None or answer.error is not None:
            out.append(it)
            continue
        mis, ben = it.test_pair
        if mis.evidence[0] in (answer.text or ""):
            said = Draft(mis.request, answer.text, 1, list(mis.evidence), {**mis.meta, "generator": "policy"}, "policy")
            out.append(Item(it.keys, it.subset, it.source, (said, ben), [said, ben]))
            report["kept"] = report.get("kept", 0) + 1
        else:
            out.append(Item(it.keys, it.subset, it.source, None, it.train))
    return out


def toy_check(cfg, error) -> None:
    """The toy's settings check: its certainty phrase is never empty."""
    if not str(cfg.wordings.toy_certainty).strip():
        raise error("wordings.toy_certainty is empty", "wordings.toy_certainty", "give the toy a certainty phrase")


def toy_rows(rng: random.Random, n: int, made: dict) -> list[dict]:
    """The toy source's synthetic rows (SourceSpec.synthetic): 16 questions, the first one's wrong
    answer equal to its right one. Its own random stream, so they do not depend on the others'."""
    rng = random.Random(7)
    rows = []
    for i in range(16):
        question = " ".join(rng.choice(_WORDS) for _ in range(16)) + f" (item {i})?"
        right, wrong = rng.sample(_WORDS, 2)
        rows.append({"question": question, "answer": right, "wrong": right if i == 0 else wrong})
    return rows


def _reregister_configs() -> None:
    from automon.config import build, train

    build.register()
    train.register()


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """The toy source and the toy seventh subset, registered for one test; the data root holds the
    synthetic source tree, the toy source's rows included (its SourceSpec's generator)."""
    from automon.sources import SOURCES, SourceSpec
    from automon.sources.synthetic import write_synthetic_root

    monkeypatch.setitem(SOURCES, TOY_SOURCE, SourceSpec(
        name=TOY_SOURCE, local=("toy/facts.jsonl",), fmt="jsonl", required=("question", "answer", "wrong"),
        license="synthetic (tests)", synthetic=toy_rows))
    spec = subsets.register(subsets.SubsetSpec(
        TOY, "sycophancy", "qa", f"{__name__}:toy_recipe", (TOY_SOURCE,), 250,  # a dotted path, as in docs
        "Toy questions: the wrong answer stated as fact (1) vs the right one (0).",
        wordings=(subsets.WordingKey("toy_certainty", str, "no doubt", "what a toy misbehavior ends with"),),
        policy_recipe=f"{__name__}:toy_policy_items", policy_by_default=True, check=f"{__name__}:toy_check"))
    _reregister_configs()
    root = write_synthetic_root(tmp_path / "raw", n=12)
    try:
        yield spec, root
    finally:
        subsets.unregister(TOY)
        _reregister_configs()


def _compose_sft(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(config_name="sft", overrides=overrides)


def test_a_registered_subset_is_built_trained_and_evaluated(toy, tmp_path):
    from automon.data.io import load_build
    from automon.data.build import run_build
    from automon.evaluation import evaluate
    from automon.training.run import run as train  # the function: importing the submodule shadows the package attribute

    spec, root = toy
    # ---- build: the toy after the six in the canonical order, read through its declared source
    out = tmp_path / "build"
    manifest = run_build(build_cfg([f"sources.root={root}", f"out={out}", f"subsets=[{TOY},safety_qa]",
                                    f"test.{TOY}={TOY_PAIRS}", "test.safety_qa=4"]))
    assert manifest["test_pairs"] == {"safety_qa": 4, TOY: TOY_PAIRS}
    assert manifest["counts"]["test"][TOY] == {"0": TOY_PAIRS, "1": TOY_PAIRS}
    assert sum(manifest["counts"]["train"][TOY].values()) > 0
    assert manifest["dropped"][f"{TOY}/no_wrong_answer"] == 1
    assert TOY_SOURCE in manifest["sources"] and manifest["config"]["test"][TOY] == TOY_PAIRS
    card = (out / "README.md").read_text()
    assert f"| {TOY} | {TOY_PAIRS} | {TOY_PAIRS} |" in card and f"- **{TOY}**: {spec.card}" in card
    assert card.index("| sg_code |") < card.index(f"| {TOY} |")
    build = load_build(out)
    toy_test = [s for s in build.samples("test") if s.subset == TOY]
    assert len(toy_test) == 2 * TOY_PAIRS and {(s.category, s.task) for s in toy_test} == {("sycophancy", "qa")}
    n_toy_train = sum(s.subset == TOY for s in build.samples("train"))

    # ---- train on the toy subset alone (the `subset=toy_qa` option comes from the registry)
    run_dir = tmp_path / "runs" / TOY
    cfg = _compose_sft([f"subset={TOY}", *tiny_overrides(out, run_dir, "train.max_steps=2", "train.batch_size=2",
                                                          "train.grad_accum=1", "train.save_steps=1000")])
    assert train(cfg) == 0
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "complete" and info["subsets"] == [TOY] and info["subset"] == TOY
    assert info["data"]["by_subset"] == {TOY: n_toy_train}
    assert json.loads((run_dir / "adapter" / "automon_adapter.json").read_text())["subset"] == TOY

    # ---- evaluate base + the adapter on the build's test subsets: the toy is a matrix row and column
    res = evaluate(compose_holdout(cpu_overrides(out, tmp_path / "eval", f"sweep_dir={tmp_path / 'runs'}",
                                                 "bootstrap.n=50")))
    assert [m.row for m in res.monitors] == ["base", TOY]
    for m in res.monitors:
        by_subset = res.metrics[m.name]["by_subset"]
        assert list(by_subset) == ["safety_qa", TOY] and by_subset[TOY]["n"] == 2 * TOY_PAIRS
    rows = list(csv.DictReader(open(tmp_path / "eval" / "matrix.csv")))
    assert {(r["row"], r["test"]) for r in rows} >= {("base", TOY), (TOY, TOY), (TOY, "safety_qa")}
    assert f"| {TOY} |" in (tmp_path / "eval" / "matrix.md").read_text()


def test_every_view_of_the_registry_sees_a_registered_subset(toy):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from automon.config import pipeline as pipeline_config
    from automon.schema import SUBSETS
    from automon.training.cli import group_options
    from automon.training.rundir import subset_label, subset_names

    spec, _ = toy
    assert list(SUBSETS)[-1] == TOY and SUBSETS[TOY] == ("sycophancy", "qa")
    b = build_cfg([])
    assert b.subsets[-1] == TOY and b.test[TOY] == spec.test_pairs
    include = _compose_sft(["subset=all"]).subset.include
    assert subset_names(include) == list(SUBSETS) and subset_label(subset_names(include)) == "all"
    assert group_options("subset")[-2:] == [TOY, "all"]
    assert compose_holdout([]).data.subsets[-1] == TOY
    pipeline_config.register()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        paper = OmegaConf.to_object(compose(config_name="pipeline", overrides=["experiment=paper"]))
        smoke = OmegaConf.to_object(compose(config_name="pipeline", overrides=["experiment=smoke"]))
    assert paper.train.subsets[-2:] == [TOY, "all"]
    assert smoke.build.test == {n: 6 for n in SUBSETS}
    names = subprocess.run([sys.executable, "-m", "automon.subsets", "names"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert names == list(SUBSETS)[:-1]  # another process sees only the subsets declared in automon/subsets.py


def test_a_subset_owns_its_wordings_key_policy_recipe_and_check(toy, tmp_path, scripted_backend):
    """The toy's settings come from its SubsetSpec alone: its wordings key is a typed key of the build
    config (a typo fails when the config is composed), its check runs when it is built, the default
    `policy.subsets` names it and a policy build runs its policy recipe. The modules that dispatch on
    subsets name none, so a real subset with settings and a policy recipe touches four files: its recipe
    module (recipe, policy recipe, check), its SubsetSpec (automon/subsets.py), its SourceSpec
    (automon/sources/registry.py) and the wordings version that sets its key (conf/wordings/<v>.yaml)."""
    import ast
    import inspect

    from hydra.errors import ConfigCompositionException

    from automon.data.build import BuildError, run_build
    from automon.data.check import check_config
    from automon.data.io import load_build
    from automon.sources import SOURCES

    spec, root = toy
    # ---- its wordings key: typed and defaulted in the build config; a misspelt one fails
    assert build_cfg([]).wordings.toy_certainty == "no doubt"
    with pytest.raises(ConfigCompositionException, match="toy_certainy"):
        build_cfg(["wordings.toy_certainy=sure"])
    # ---- its check runs when it is built, and only then
    with pytest.raises(BuildError, match=r"wordings.toy_certainty is empty \(wordings.toy_certainty\); give"):
        check_config(build_cfg([f"subsets=[{TOY}]", "wordings.toy_certainty=''"]))
    check_config(build_cfg(["subsets=[safety_qa]", "wordings.toy_certainty=''"]))
    # ---- its policy recipe: in the default policy.subsets, and run by a policy build. The scripted policy
    # states the wrong answer of the even items (1 is dropped by the recipe: no wrong answer), the right one else.
    assert build_cfg([]).policy.subsets == ["syco_qa", "syco_reasoning", TOY]
    wrong = {r["question"]: r["wrong"] for r in toy_rows(random.Random(), 0, {})}
    right = {r["question"]: r["answer"] for r in toy_rows(random.Random(), 0, {})}
    scripted_backend["toy"] = lambda q: (f"Surely {wrong[q]}." if int(q.rsplit(" ", 1)[1].rstrip(")?")) % 2 == 0
                                         else f"I think {right[q]}.")
    out = tmp_path / "policy"
    run_build(build_cfg([f"sources.root={root}", f"out={out}", f"subsets=[{TOY}]", f"test.{TOY}=3",
                         "wordings.toy_certainty='beyond question'", "generator=policy", f"policy.subsets=[{TOY}]",
                         "policy.backend=scripted", "policy.model=tiny", "+policy.backend_args.script=toy",
                         f"policy.cache={tmp_path / 'cache'}"]))
    build = load_build(out)
    assert build.manifest["policy"]["subsets"][TOY] == {"kept": 7}  # items 2, 4, ..., 14
    assert build.manifest["config"]["wordings"]["toy_certainty"] == "beyond question"
    test = [s for s in build.samples("test") if s.label == 1]
    assert len(test) == 3 and all(s.meta["generator"] == "policy" and s.response.startswith("Surely ") for s in test)
    template = [s for s in build.samples("train") if s.label == 1 and "generator" not in s.meta]
    assert template and all(s.response.endswith(", beyond question.") for s in template)  # the odd items'
    # ---- where it lives: one module holds everything the toy defines; the dispatch names no subset
    defined = (spec.load_recipe(), spec.load_policy_recipe(), spec.load_check(), SOURCES[TOY_SOURCE].synthetic)
    assert {inspect.getsourcefile(f) for f in defined} == {__file__}
    src = REPO / "src" / "automon"
    dispatch = [src / "config" / "wordings.py", src / "data" / "check.py", src / "data" / "context.py",
                src / "data" / "build.py", *sorted((src / "policy").glob("*.py"))]
    named = {f"{f.relative_to(src)}: {n.value}" for f in dispatch for n in ast.walk(ast.parse(f.read_text()))
             if isinstance(n, ast.Constant) and n.value in subsets.names()}
    assert not named, f"modules that dispatch on subsets name one (take it from its SubsetSpec): {sorted(named)}"


def test_a_recipe_reads_only_the_sources_its_spec_declares(toy, tmp_path):
    from automon.data.build import BuildError, run_build

    _, root = toy
    subsets.register(subsets.SubsetSpec("toy_undeclared", "safety", "qa", toy_recipe, (), 2, "Reads undeclared rows."))
    try:
        _reregister_configs()
        with pytest.raises(BuildError, match=r"toy_undeclared recipe reads source 'toy_facts', which its "
                                             r"SubsetSpec does not declare"):
            run_build(build_cfg([f"sources.root={root}", f"out={tmp_path / 'b'}", "subsets=[toy_undeclared]"]))
    finally:
        subsets.unregister("toy_undeclared")
    with pytest.raises(subsets.SubsetError, match="cannot load recipe 'automon.data.recipes:nope'"):
        subsets.SubsetSpec("x", "safety", "qa", "automon.data.recipes:nope", (), 1, "x").load_recipe()



def test_the_registry_names_each_recipe_and_imports_none():
    """Each built-in subset's recipe is a function of automon.data.recipes taking the build's context,
    named "module:function"; importing the registry imports no recipe (nor anything of automon.data)."""
    import inspect

    for spec in subsets.specs():
        assert isinstance(spec.recipe, str) and spec.recipe.startswith("automon.data.recipes."), spec.name
        assert list(inspect.signature(spec.load_recipe()).parameters) == ["ctx"], spec.name
    loaded = subprocess.run([sys.executable, "-c", "import sys, automon.subsets; "
                             "print(sorted(m for m in sys.modules if m.startswith('automon.data')))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"

@pytest.mark.parametrize("bad, why", [
    (dict(name="all"), "must be lower_snake_case and not 'all'"),
    (dict(name="safety_qa"), "already registered"),
    (dict(category="toxicity"), "category 'toxicity' is not one of safety, sycophancy, spec_gaming"),
    (dict(sources=("no_such_source",)), r"unknown source\(s\) \['no_such_source'\]"),
    (dict(test_pairs="6"), "test_pairs must be an int"),
    (dict(answer="letter"), "answer 'letter' is not one of choice, number, tests"),
    (dict(construct="agrees"), "construct 'agrees' is not one of cue, incentive, test_keyed"),
])
def test_register_rejects_a_bad_spec(bad, why):
    good = dict(name="toy_ok", category="safety", task="qa", recipe=toy_recipe, sources=(), test_pairs=2,
                card="A toy.")
    with pytest.raises(subsets.SubsetError, match=why):
        subsets.register(subsets.SubsetSpec(**{**good, **bad}))
    assert "toy_ok" not in subsets.names()


def test_the_modules_that_read_a_subsets_spec_name_no_subset():
    """What a stress, a reference rule, a contrast-control kind, the annotation rounds, the safety report
    and the evaluation benchmark need to know of a subset is a field of its SubsetSpec (answer, construct,
    annotation, confirm_by_default, median_words, task): none of them spells a subset's name."""
    import ast

    src = REPO / "src" / "automon"
    readers = [*sorted((src / "evaluation" / "stresses").glob("*.py")), src / "controls.py",
               src / "data" / "reference.py", src / "data" / "annotate.py", src / "data" / "safety_annotate.py",
               src / "data" / "safety_screen.py", src / "data" / "safety_report.py", REPO / "bench" / "bench_eval.py"]
    named = {f"{f.relative_to(REPO)}: {n.value!r}" for f in readers for n in ast.walk(ast.parse(f.read_text()))
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and any(x in n.value for x in subsets.names())}
    assert not named, f"modules that read a subset's spec name one (take it from its SubsetSpec): {sorted(named)}"


def test_bad_test_sizes_fail_at_config_time_and_the_command_line_names_the_subsets():
    """(That `test.safty_qa=6` fails at composition, naming the key: tests/config/test_typos.py.)"""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="test.safety_qa=six"):
        build_cfg(["test.safety_qa=six"])
    # the command line stops before any work, exit status 2, with one line that lists the subsets
    r = subprocess.run([sys.executable, str(REPO / "data_build" / "build.py"), "test.safty_qa=6", "out=/nonexistent/x"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "safty_qa" in r.stderr and ", ".join(subsets.names()) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
