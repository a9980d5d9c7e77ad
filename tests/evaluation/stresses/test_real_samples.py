"""Every stress on real test pairs made by the recipes from the local sources (conftest.py; skipped
without ../shared/data/raw): valid samples, labels and extracted answers unchanged, the same bytes
for the same seed, code comments that leave the program as it was, and most samples changed."""

from __future__ import annotations

import ast
import textwrap
import warnings

import pytest

from automon.evaluation.stresses import STRESSES, stress
from automon.evaluation.stresses.placement import C, PYTHON, code_of
from automon.evaluation.stresses.recheck import answer_of

PROSE = ["safety_qa", "syco_qa", "syco_reasoning", "sg_qa"]


def _check(xs, name):
    a = stress(xs, name, seed=7)
    assert [y.to_json() for y in a] == [y.to_json() for y in stress(xs, name, seed=7)]
    for x, y in zip(xs, a):
        assert y.label == x.label and y.pair_id == f"{x.pair_id}~{name}"
        assert answer_of(y) == answer_of(x), (name, x.id)
    return a


@pytest.mark.parametrize("name", ["inject", "claim", "paraphrase"])
@pytest.mark.parametrize("subset", PROSE)
def test_prose(real_prose, name, subset):
    xs = real_prose[subset][:80]
    assert len(xs) >= 20, subset
    if subset not in STRESSES[name].subsets:
        pytest.skip(f"{name} does not cover {subset}")
    ys = _check(xs, name)
    changed = sum(y.response != x.response for x, y in zip(xs, ys))
    if name == "paraphrase":
        assert changed >= len(xs) // 2, (subset, changed, len(xs))
        kept = [y for y in ys if y.meta["stress"]["fallback"]]
        assert all(y.response == x.response for x, y in zip(xs, ys) if y in kept)
    else:
        assert changed == len(xs)


def _program(code: str, language: str):
    if language == PYTHON:
        with warnings.catch_warnings():  # SVEN's old string escapes
            warnings.simplefilter("ignore")
            try:
                return ast.dump(ast.parse(textwrap.dedent(code)))
            except SyntaxError:
                return None
    return [ln for ln in code.split("\n") if not ln.lstrip().startswith("//")]


@pytest.mark.parametrize("name", ["inject", "claim"])
@pytest.mark.parametrize("subset", ["safety_code", "sg_code"])
def test_code_comments_leave_the_program_as_it_was(real_code, name, subset):
    xs = real_code[subset][:80]
    assert len(xs) >= 10, subset
    ys = _check(xs, name)
    places = set()
    for x, y in zip(xs, ys):
        assert y.response != x.response
        cx, cy = code_of(x), code_of(y)
        before, after = x.response[cx.start:cx.end], y.response[cy.start:cy.end]
        places.add(y.meta["stress"]["place"])
        if name == "claim" and subset == "sg_code":  # outside the block: the code is byte for byte the same
            assert after == before
            continue
        if cx.language == PYTHON and _program(before, PYTHON) is not None:
            assert _program(after, PYTHON) == _program(before, PYTHON), x.id
        elif cx.language == C:
            # the original lines in order (a // line added between them), unless the code had // lines
            if "//" not in before:
                assert _program(after, C) == before.split("\n"), x.id
    assert "start" in places and "end" in places
