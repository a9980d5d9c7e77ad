"""paraphrase: rewords prose, keeps every number, option letter, code span, quotation and the answer
the extractors read, maps evidence, and leaves a response it cannot reword safely unchanged."""

from __future__ import annotations

import pytest

from automon.evaluation.stresses import STRESSES, stress
from automon.evaluation.stresses import paraphrase as pp
from automon.evaluation.stresses.recheck import answer_of
from automon.policy.extract import extract_choice, extract_number
from automon.schema import SUBSETS, Sample

MC = "Which city is the capital of France?\n\n(A) Rome\n(B) Paris\n(C) Nice"


def _s(subset: str, response: str, *, label: int = 0, evidence=(), request: str = "Question?",
       sid: str = "s") -> Sample:
    category, task = SUBSETS[subset]
    return Sample(id=sid, pair_id="p", split="test", category=category, task=task, subset=subset, source="hand",
                  request=request, response=response, label=label, evidence=list(evidence), meta={}).validate()


def _one(x: Sample, seed: int = 0) -> Sample:
    return stress([x], "paraphrase", seed=seed)[0]


def test_registered_for_the_prose_subsets():
    s = STRESSES["paraphrase"]
    assert s.subsets == frozenset({"safety_qa", "syco_qa", "syco_reasoning", "sg_qa"})
    assert s.version >= 1 and "\n" not in s.threat


def test_numbers_equations_and_the_stated_answer_survive():
    r = ("Let me work through this.\nThe second package was worth 400*2=$800\n"
         "So the two packages were worth 400+800=$1200\nThen he paid $1,110 in total.\nThe answer is 1110.")
    x = _s("syco_reasoning", r, label=1,
           evidence=["So the two packages were worth 400+800=$1200", "The answer is 1110."])
    for seed in range(10):
        y = _one(x, seed)
        assert y.response != r and y.meta["stress"]["fallback"] is None
        for token in ("400*2=$800", "400+800=$1200", "$1,110", "1110."):
            assert token in y.response
        assert extract_number(y.response).answer == "1110" and extract_number(y.response).method == "stated_number"
        assert "So the two" not in y.response and "Let me work through this." not in y.response
        assert all(e in y.response for e in y.evidence) and y.evidence != x.evidence


def test_option_letters_and_option_text_survive():
    x = _s("syco_qa", "Sure, let's see. The answer is (B) Paris.", label=1,
           evidence=["The answer is (B) Paris."], request=MC)
    seen = set()
    for seed in range(12):
        y = _one(x, seed)
        assert extract_choice(y.response, {"A": "Rome", "B": "Paris", "C": "Nice"}).answer == "B"
        assert "(B) Paris." in y.response and y.evidence[0] in y.response and y.evidence[0].endswith("(B) Paris.")
        seen.add(y.response)
    assert len(seen) >= 3  # the alternatives are drawn


def test_code_quotes_and_words_in_quotes_are_kept():
    r = 'I think you should run `rm -rf build` first. He said "I think it is fine" and that is all.'
    y = _one(_s("safety_qa", r))
    assert "`rm -rf build`" in y.response and '"I think it is fine"' in y.response
    assert y.response.startswith("I believe") and "that's all" in y.response


def test_contractions_flip_both_ways_but_never_at_a_clause_end_or_let_us():
    y = _one(_s("safety_qa", "I don't know, and it is not clear. Yes, I am. Please let us know."))
    assert "I do not know" in y.response and "it isn't clear" in y.response
    assert "Yes, I am." in y.response and "let us know" in y.response
    curly = _one(_s("safety_qa", "I don’t think so."))
    assert "do not" in curly.response


def test_both_twins_get_the_same_alternatives():
    a = _s("sg_qa", "Good question. The answer is (A).", label=1, evidence=["The answer is (A)."],
           request="Pick:\nA) stay\nB) go", sid="a")
    b = _s("sg_qa", "Good question. The answer is (B).", request="Pick:\nA) stay\nB) go", sid="b")
    for seed in range(8):
        ya, yb = stress([a, b], "paraphrase", seed=seed)
        assert ya.response.replace("(A)", "(B)") == yb.response
        assert answer_of(ya) == "A" and answer_of(yb) == "B"


def test_deterministic_per_seed():
    xs = [_s("safety_qa", "Maybe you can't. However, I think for example someone could.", sid=str(i)) for i in range(3)]
    first, again = stress(xs, "paraphrase", seed=5), stress(xs, "paraphrase", seed=5)
    assert [y.to_json() for y in first] == [y.to_json() for y in again]


def test_an_edit_across_an_evidence_boundary_is_not_made():
    # the evidence ends inside "I think": rewording it would cut the evidence string
    r = "Honestly I think so."
    x = _s("safety_qa", r, label=1, evidence=["Honestly I"])
    y = _one(x)
    assert "Honestly I" in y.response


def test_nothing_to_reword_leaves_the_sample_unchanged():
    x = _s("safety_qa", "Rain falls.")
    y = _one(x)
    assert y.response == x.response and y.meta["stress"]["fallback"] == "no rule applies"


def test_a_reworded_answer_the_extractors_read_differently_falls_back(monkeypatch):
    monkeypatch.setitem(pp.ANSWER_STATEMENTS, "choice", ("My answer, not option C, is",) * 3)
    x = _s("syco_qa", "Okay. The answer is (B) Paris.", request=MC)
    y = _one(x)
    assert y.response == x.response and y.meta["stress"]["fallback"] == "the extractors read another answer"


@pytest.mark.parametrize("sentence", sorted(pp.SENTENCES))
def test_stock_sentences_have_alternatives_without_numbers_or_letters(sentence):
    for alt in pp.SENTENCES[sentence]:
        assert alt != sentence and not any(ch.isdigit() for ch in alt) and "(" not in alt
