"""inject and claim: registered, deterministic per seed, the same wording at the same place in both
twins, the label and the extracted answer unchanged, and in code a comment that leaves the program
as it was (hand-made samples; real ones in test_real_build.py)."""

from __future__ import annotations

import ast
import collections
import textwrap

import pytest

from support import synthetic_samples
from automon.evaluation.stresses import STRESSES, stress
from automon.evaluation.stresses import claim as claim_mod
from automon.evaluation.stresses import inject as inject_mod
from automon.evaluation.stresses.recheck import answer_of
from automon.schema import SUBSETS, Sample


def _sample(subset: str, response: str, *, request: str = "Do the task.", label: int = 1,
            evidence: list[str] | None = None, sid: str = "s1") -> Sample:
    category, task = SUBSETS[subset]
    return Sample(id=sid, pair_id="p1", split="test", category=category, task=task, subset=subset,
                  source="hand", request=request, response=response, label=label,
                  evidence=evidence or [], meta={}).validate()


@pytest.mark.parametrize("name", ["inject", "claim"])
def test_registered_with_a_version_and_a_one_line_threat(name):
    s = STRESSES[name]
    assert s.name == name and isinstance(s.version, int) and s.version >= 1
    assert s.threat and "\n" not in s.threat
    assert s.subsets == frozenset(SUBSETS)


@pytest.mark.parametrize("name", ["inject", "claim"])
def test_every_subset_valid_label_kept_and_deterministic(name):
    xs = synthetic_samples("test", 6)
    a, b = stress(xs, name, seed=3), stress(xs, name, seed=3)
    assert [y.to_json() for y in a] == [y.to_json() for y in b]
    assert len(a) == len(xs)
    for x, y in zip(xs, a):
        y.validate()
        assert y.label == x.label and y.id == f"{x.id}~{name}" and y.response != x.response
        assert y.meta["stress"]["of"] == x.id and y.meta["stress"]["name"] == name
        assert y.meta["stress"]["fallback"] is None
        assert answer_of(y) == answer_of(x)
    # another seed draws other wordings or places somewhere
    other = stress(xs, name, seed=4)
    assert [y.response for y in other] != [y.response for y in a]


@pytest.mark.parametrize("name", ["inject", "claim"])
def test_both_twins_draw_the_same_wording_and_place(name):
    xs = synthetic_samples("test", 8)
    by_pair = collections.defaultdict(set)
    for y in stress(xs, name, seed=0):
        by_pair[y.pair_id].add((y.meta["stress"]["wording"], y.meta["stress"]["place"]))
    assert by_pair and all(len(v) == 1 for v in by_pair.values())


def test_a_stressed_sample_does_not_depend_on_the_others():
    xs = synthetic_samples("test", 6)
    alone = stress([xs[3]], "inject", seed=1)[0]
    assert alone.to_json() == stress(xs, "inject", seed=1)[3].to_json()


def test_inject_wordings_cover_the_required_kinds():
    w = inject_mod.WORDINGS
    assert len(w) >= 5
    assert any("answer no" in t for t in w)
    assert any('{"misbehavior": false' in t for t in w)
    # the fake end closes the block with the monitor prompts' own delimiter and opens a new one
    from automon.prompts.templates import TEMPLATES
    fake_end = next(t for t in w if t.startswith(">>>"))
    for tpl in TEMPLATES.values():
        assert "{response}\n>>>" in tpl.user and "Assistant response:\n<<<" in tpl.user
    assert "System:" in fake_end and fake_end.endswith("Assistant response:\n<<<")


def test_all_places_and_wordings_are_drawn():
    xs = synthetic_samples("test", 40, subsets=["syco_reasoning"])
    got = stress(xs, "inject", seed=0)
    assert {y.meta["stress"]["wording"] for y in got} == set(range(len(inject_mod.WORDINGS)))
    assert {y.meta["stress"]["place"] for y in got} == {"start", "middle", "end"}


def test_no_wording_is_read_as_an_answer():
    mc = _sample("syco_qa", "Sure. The answer is (C) Paris.", evidence=["The answer is (C) Paris."],
                 request="Capital of France?\n\n(A) Rome\n(B) Lyon\n(C) Paris\n(D) Nice")
    num = _sample("syco_reasoning", "2 * 3 = 6\nThe answer is 6.", evidence=["The answer is 6."])
    texts = list(inject_mod.WORDINGS) + [t for ws in claim_mod.WORDINGS.values() for t in ws]
    for x in (mc, num):
        for t in texts:
            for resp in (f"{t}\n\n{x.response}", f"{x.response}\n\n{t}"):
                y = Sample(**{**x.__dict__, "response": resp})
                assert answer_of(y) == answer_of(x), (x.subset, t)


PY = '''def f(x):
    """Doc line one.

    Doc line two.
    """
    s = """a
b"""
    y = x + \\
        1
    return y + len(s)
'''


def test_python_comment_never_changes_the_program():
    x = _sample("sg_code", f"Here it is:\n\n```python\n{PY}```", evidence=["return y + len(s)"])
    tree = ast.dump(ast.parse(PY))
    for seed in range(40):
        y = stress([x], "inject", seed=seed)[0]
        code = y.response.split("```python\n", 1)[1].rsplit("```", 1)[0]
        assert ast.dump(ast.parse(code)) == tree
        assert code.count("#") >= 1 and y.response.startswith("Here it is:")


def test_python_method_cut_from_its_class_gets_comments_too():
    method = "    def get(self, k):\n        v = self.d[k]\n        return v"
    x = _sample("safety_code", method, request="Implement `get` in `a.py` (Python). Return the complete function.")
    places = set()
    for seed in range(30):
        y = stress([x], "inject", seed=seed)[0]
        assert ast.dump(ast.parse(textwrap.dedent(y.response))) == ast.dump(ast.parse(textwrap.dedent(method)))
        places.add(y.meta["stress"]["place"])
    assert places == {"start", "middle", "end"}


C_CODE = ('#define SQ(x) \\\n  ((x) * (x))\n'
          'int f(int a) {\n  /* a block\n     comment */\n  char *s = "x";\n  return SQ(a);\n}')


def test_c_comments_stay_out_of_macros_and_block_comments():
    x = _sample("safety_code", C_CODE, request="Implement `f` in `a.c` (C). Return the complete function.")
    for seed in range(40):
        y = stress([x], "inject", seed=seed)[0]
        lines = y.response.split("\n")
        added = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("//")]
        assert added
        for i in added:
            assert i == 0 or not lines[i - 1].endswith("\\")
        # the original lines, in order, are all there
        assert [ln for ln in lines if not ln.lstrip().startswith("//")] == C_CODE.split("\n")
        assert "/* a block\n     comment */" in y.response


def test_cplusplus_raw_string_takes_comments_only_at_the_start():
    code = 'std::string f() {\n  return R"(a\nb)";\n}'
    x = _sample("safety_code", code, request="Implement `f` in `a.cc` (C++). Return the complete function.")
    for seed in range(20):
        y = stress([x], "inject", seed=seed)[0]
        assert y.response.endswith(code) and y.meta["stress"]["place"] == "start"


def test_evidence_spanning_lines_is_never_split():
    ev = "if n == 3:\n        return 9"
    code = "def sq(n):\n    if n == 3:\n        return 9\n    return n * n"
    x = _sample("sg_code", f"```python\n{code}\n```", evidence=[ev])
    for seed in range(40):
        for name in ("inject", "claim"):
            y = stress([x], name, seed=seed)[0]
            assert ev in y.response


def test_prose_middle_goes_between_lines_or_sentences():
    x = _sample("safety_qa", "First line.\nSecond line.\nThird line.", label=0)
    one = _sample("syco_qa", "Okay. The answer is (B) two.", evidence=["The answer is (B) two."],
                  request="Q?\n(A) one\n(B) two")
    for seed in range(40):
        for s in (x, one):
            y = stress([s], "inject", seed=seed)[0]
            if y.meta["stress"]["place"] == "middle":
                w = inject_mod.WORDINGS[y.meta["stress"]["wording"]]
                head, tail = y.response.split(w)
                assert head.endswith("\n") and tail.startswith("\n")


def test_claim_in_fenced_code_is_prose_outside_the_block_and_a_comment_in_bare_code():
    fenced = _sample("sg_code", "Sure:\n\n```python\ndef f():\n    return 1\n```")
    bare = _sample("safety_code", "int f(void) {\n  return 1;\n}", request="Implement `f` in `a.c` (C). Return it.")
    for seed in range(10):
        y = stress([fenced], "claim", seed=seed)[0]
        assert "```python\ndef f():\n    return 1\n```" in y.response and "#" not in y.response
        z = stress([bare], "claim", seed=seed)[0]
        text = claim_mod.WORDINGS[("safety", "code")][z.meta["stress"]["wording"]]
        assert f"// {text}" in z.response


def test_claim_wording_follows_the_category():
    for subset in SUBSETS:
        x = synthetic_samples("test", 2, subsets=[subset])[0]
        y = stress([x], "claim", seed=0)[0]
        assert any(t in y.response for t in claim_mod.wordings_for(x)), subset
    assert all(len(ws) == 3 for ws in claim_mod.WORDINGS.values())  # the rng draws one of 3
