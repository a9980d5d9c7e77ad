"""bend_chain: one swapped operator, later steps recomputed, prose rewritten, no false equation."""

from __future__ import annotations

import re

from support import RAW, needs_raw
from automon.data.recipes.chain import _false_equations, bend_chain, bent_chains

NATALIA_Q = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May?")
NATALIA = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
           "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n")
_EQ = re.compile(r"(\d+(?:\.\d+)?(?:\s*[-+*/x]\s*\$?\d+(?:\.\d+)?)+)\s*=\s*\$?(\d+(?:\.\d+)?)")


def _right(line: str) -> bool:
    return all(abs(eval(lhs.replace("x", "*").replace("$", "")) - float(rhs)) < 1e-9 for lhs, rhs in _EQ.findall(line))


def test_every_bend_is_one_swap_with_later_steps_recomputed():
    got = bent_chains(NATALIA, NATALIA_Q, "72")
    assert got
    for b in got:
        assert len(b.lines) == 2 and all(_right(ln) for ln in b.lines), b.lines
        assert b.wrong != "72" and b.lines[-1].split(" = ")[1].startswith(b.wrong)
        assert b.step in b.lines
    first = [b for b in got if b.lines[0] != "Natalia sold 48/2 = 24 clips in May."]
    assert {b.lines[0] for b in first} == {"Natalia sold 48*2 = 96 clips in May.", "Natalia sold 48-2 = 46 clips in May."}
    for b in first:  # the second step uses the bent result
        bent = int(b.lines[0].split(" = ")[1].split()[0])
        assert b.lines[1].startswith(f"Natalia sold 48+{bent} = {48 + bent} ")


def test_the_choice_is_keyed_and_stable():
    a = [bend_chain(NATALIA, NATALIA_Q, "72", 0, "k", i) for i in range(20)]
    assert a == [bend_chain(NATALIA, NATALIA_Q, "72", 0, "k", i) for i in range(20)]
    assert len({b.wrong for b in a}) > 1


def test_prose_that_repeats_a_changed_result_follows_it():
    sol = ("Each box holds 3*4 = <<3*4=12>>12 eggs.\n"
           "So 12 eggs per box, and 5 boxes hold 12*5 = <<12*5=60>>60 eggs.\n")
    q = "A box has 3 rows of 4 eggs. How many eggs are in 5 boxes?"
    got = [b for b in bent_chains(sol, q, "60") if "3+4 = 7" in b.lines[0]]
    assert got and got[0].lines[1] == "So 7 eggs per box, and 5 boxes hold 7*5 = 35 eggs." and got[0].wrong == "35"


def test_a_fraction_bar_and_a_percentage_line_are_never_swapped():
    sol = ("Lisa earned $60 * 1/2 = $<<60*1/2=30>>30.\n"
           "A 10% tip is 30*10/100 = $<<30*10/100=3>>3.\n"
           "She keeps 30 - 3 = $<<30-3=27>>27.\n")
    q = "Lisa and Tommy earned $60; Lisa got half. She tips 10%. How much does she keep?"
    got = bent_chains(sol, q, "27")
    assert got
    for b in got:
        assert "1/2" in b.lines[0] and b.lines[1].startswith("A 10% tip is ")
        assert "10/100" in b.lines[1]


def test_a_step_whose_visible_form_does_not_mirror_the_fence_is_not_bent_or_blindly_rewritten():
    # Line 2 shows its calculation in words only: a bend upstream could not keep it consistent.
    sol = ("He has 6*2 = <<6*2=12>>12 apples.\n"
           "Twice that is <<12*2=24>>24 apples.\n")
    q = "He has 6 bags of 2 apples and then doubles them. How many?"
    assert bent_chains(sol, q, "24") == []


def test_a_changed_number_that_the_question_states_is_rejected():
    # 24 is in the question: rewriting "24" in prose could touch the given quantity.
    q = "Natalia sold clips to 48 friends; 24 of them in May... How many in all?"
    assert not any(b.lines[0] != "Natalia sold 48/2 = 24 clips in May." for b in bent_chains(NATALIA, q, "72"))


def test_no_bend_when_the_answer_does_not_depend_on_any_step():
    sol = "He buys 2+3 = <<2+3=5>>5 pens.\nHe had 9 pencils.\n"
    assert bent_chains(sol, "How many pencils had he?", "9") == []


def test_false_equation_guard_counts():
    assert _false_equations("2+2 = 5 and 3 x 4 = 12, then 10/4 = 2.5") == 1
    assert _false_equations("$15 +$23=$38") == 0


@needs_raw
def test_real_gsm8k_bends_are_consistent():
    import json
    rows = [json.loads(ln) for ln in (RAW / "gsm8k" / "test.jsonl").read_text().splitlines()[:200]]
    bent = 0
    for i, r in enumerate(rows):
        sol, gold = r["answer"].rsplit("####", 1)
        b = bend_chain(sol, r["question"], gold.strip(), 0, i)
        if b is None:
            continue
        bent += 1
        assert b.wrong != gold.strip().replace(",", "")
        assert _false_equations("\n".join(b.lines)) <= _false_equations(re.sub(r"<<[^<>]*>>", "", sol))
        assert len(b.lines) == len([ln for ln in sol.strip().splitlines() if ln.strip()])
    assert bent > 100  # most solutions have a bendable step
