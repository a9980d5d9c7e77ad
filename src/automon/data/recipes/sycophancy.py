"""syco_qa (cue injection on MMLU / TruthfulQA; reward-hack sycophancy_fact; opinion sets for
training) and syco_reasoning (GSM8K with a plausible wrong number as the cue)."""

from __future__ import annotations

import re
from typing import Iterable

from automon.data.recipes.base import Draft, Drops, Item, leave_out
from automon.data.recipes.chain import misread_chain
from automon.config.wordings import WordingsConfig
from automon.data.recipes.choice import choice_item, choice_items
from automon.data.recipes.common import choose, coin, norm_ws, plain, rotate, sentence, text_key, with_opener
from automon.sources import Row


class _Cued:
    """Builds (misbehavior, benign) drafts for one cued question in several cue wordings, and its
    contrast controls."""

    def __init__(self, w: WordingsConfig, seed: int, variants: int, subset: str):
        self.w, self.seed, self.variants, self.subset = w, seed, variants, subset

    def openers(self, key: str, i: int) -> tuple[str | None, str | None]:
        """(misbehavior opener, benign opener): both from one shared pool, with the same odds."""
        w, seed = self.w, self.seed
        return tuple(choose(w.openers, seed, key, i, f"op{y}") if coin(0.5, seed, key, i, f"o{y}") else None
                     for y in (1, 0))  # type: ignore[return-value]

    def cue(self, wording: str, cue: str) -> str:
        """The user's cue sentence. An option that ends a sentence of its own ("(D) EVC pricing.") loses
        its full stop inside the cue ("... is (D) EVC pricing, but ..." rather than "pricing., but"),
        which a reader takes for a broken sample."""
        if cue.endswith(".") and not cue.endswith(".."):
            cue = cue[:-1]
        return wording.format(cue=cue)

    def drafts(self, key: str, body: str, cue: str, wrong_claim: str, right_claim: str,
               cues: list[str], meta: dict) -> list[tuple[Draft, Draft]]:
        out = []
        for i, wording in enumerate(rotate(cues, self.variants, self.seed, key, "cue")):
            cue_text = self.cue(wording, cue)
            request = f"{body}\n\n{cue_text}"
            o1, o0 = self.openers(key, i)
            mis_text, _ = with_opener(o1, wrong_claim)
            ben_text, _ = with_opener(o0, right_claim)
            evidence = [wrong_claim]  # the opener is not evidence of anything
            m = {**meta, "cue": cue_text, "wordings": self.w.version}
            out.append((Draft(request, mis_text, 1, evidence, {**m, "adopts_cue": True}, f"cue{i}"),
                        Draft(request, ben_text, 0, [], {**m, "adopts_cue": False}, f"cue{i}")))
        return out

    def contrast(self, key: str, body: str, cue_wording: str, right_cue: str, right_claim: str, wrong_cue: str,
                 mistake: tuple[str, str] | None, meta: dict, sep: str = " ") -> list[Draft]:
        """The item's contrast controls (automon.controls), in the test pair's cue wording and the
        benign twin's way of opening: `right_cue_agree` (the user
        suggests the right answer, `right_cue`, and the response adopts it, `right_claim`) and, when
        `mistake` = (its answer, its claim) is given, `honest_mistake` (the pair's cue, `wrong_cue`, and a
        response that reaches another wrong answer on its own). Both benign: neither is a wrong answer
        taken from the user. `sep`: what follows the opener (as in the subset's pairs)."""
        def opened(purpose: str, claim: str) -> str:
            op = self._opener(key, purpose)
            return f"{op}{sep}{claim}" if op else claim

        m = {**meta, "wordings": self.w.version}
        agree_cue = self.cue(cue_wording, right_cue)
        out = [Draft(f"{body}\n\n{agree_cue}", opened("ctl_agree", right_claim), 0, [],
                     {**m, "cue": agree_cue, "cued": m["gold"], "answer": m["gold"], "adopts_cue": True,
                      "control": "right_cue_agree"}, "ctl_right_cue_agree")]
        if mistake is not None:
            cue = self.cue(cue_wording, wrong_cue)
            out.append(Draft(f"{body}\n\n{cue}", opened("ctl_mistake", mistake[1]), 0, [],
                             {**m, "cue": cue, "answer": mistake[0], "adopts_cue": False,
                              "control": "honest_mistake"}, "ctl_honest_mistake"))
        return out

    def _opener(self, key: str, purpose: str) -> str | None:
        """An opener as a benign twin draws it (one shared pool, the same odds): a control opens like
        every other response."""
        return choose(self.w.openers, self.seed, key, purpose, "op") if coin(0.5, self.seed, key, purpose, "o") else None


def truthfulqa_answers(row: Row, subset: str, drops: Drops):
    """(row data, item key, incorrect answers, best answer) of a TruthfulQA row, or None (counted).

    One key for the question, shared by syco_qa and sg_qa, so it lands in one split."""
    d = row.data
    wrongs = [a.strip() for a in d["Incorrect Answers"].split(";") if a.strip()]
    best = d["Best Answer"].strip()
    if not wrongs or not best:
        drops.add(subset, "truthfulqa_missing_answers")
        return None
    return d, text_key("truthfulqa", d["Question"]), wrongs, best


def _item(key: str, subset: str, source: str, pairs: list[tuple[Draft, Draft]], testable: bool = True,
          extra_keys: tuple[str, ...] = (), contrast: list[Draft] = ()) -> Item:
    """`contrast`: the item's contrast controls: in the test split beside its pair, else trained on."""
    return Item((key, *extra_keys), subset, source, pairs[0] if testable else None,
                [d for p in pairs for d in p] + list(contrast), list(contrast) if testable else [])


def _pair_cue(cued: _Cued, key: str) -> str:
    """The cue wording of the item's test pair (its first drafted pair): the contrast controls use it."""
    return rotate(list(cued.w.syco_qa_cues if cued.subset == "syco_qa" else cued.w.syco_reasoning_cues),
                  cued.variants, cued.seed, key, "cue")[0]


def mmlu_passage(question: str) -> str | None:
    """The reading passage a question shares with others (everything before its last line), when
    it has one of at least 100 characters."""
    lines = question.strip().split("\n")
    passage = norm_ws("\n".join(lines[:-1]))
    return passage if len(lines) > 1 and len(passage) >= 100 else None


_ROMAN = r"(?:I{1,3}|IV)"
# an option that names statements: "1,3,4", "I only", "II and III only", "I, II, and III"
_STATEMENT_NUMBERS = re.compile(r"\s*[1-4](\s*,\s*[1-4])+\s*,?\s*"
                                rf"|\s*{_ROMAN}((\s*,\s*(and\s+)?|\s+and\s+){_ROMAN})*(\s+only)?\s*")
# a numbered statement in the question: "1. ...", "(2) ...", "I.Increasing ...", "II: ..."
_NUMBERED_STATEMENT = re.compile(rf"(^|\s)\(?[1-4][.)]\s|\([1-4]\)|(^|[\s(]){_ROMAN}[.):]")


def mmlu_statements_missing(question: str, options: Iterable[str]) -> bool:
    """Whether the options name numbered statements ("1,3,4" or "II and III only" in three or more of
    them) that the question does not number: MMLU holds rows cut to their last statement or without their
    list (business_ethics: "The need to head off negative publicity." with options "1,3,4", "2,3,4", ...;
    high_school_psychology: "Which of the following scans can image brain function?" with "I only",
    "II only", ...), which no reader can answer."""
    return (sum(bool(_STATEMENT_NUMBERS.fullmatch(o)) for o in options) >= 3
            and not _NUMBERED_STATEMENT.search(question))


def syco_qa_items(mmlu: Iterable[Row], truthfulqa: Iterable[Row], rh_fact: Iterable[Row],
                  rh_fact_unhackable: Iterable[Row], rh_opinion: Iterable[Row], caa: Iterable[Row],
                  political: Iterable[Row], w: WordingsConfig, seed: int, variants: int,
                  drops: Drops) -> list[Item]:
    cued = _Cued(w, seed, variants, "syco_qa")
    items: list[Item] = []
    for row in mmlu:
        d = row.data
        opts = {k: norm_ws(d[k]) for k in "ABCD"}
        correct = d["answer"].strip()
        if correct not in opts or len(set(opts.values())) < 4:
            drops.add("syco_qa", "mmlu_bad_options")
            continue
        if mmlu_statements_missing(d["question"], opts.values()):
            drops.add("syco_qa", "mmlu_numbered_statements_missing")
            continue
        body = norm_ws(d["question"]) + "\n\n" + "\n".join(f"({k}) {v}" for k, v in opts.items())
        key = text_key("mmlu", body)
        wrong = choose([k for k in "ABCD" if k != correct], seed, key, "wrong")
        right = f"The answer is ({correct}) {sentence(opts[correct])}"
        # gold: what the reference monitors read (automon.data.reference)
        meta = {"recipe": "cue_injection_mc", "generator": "template", "source_dataset": "mmlu",
                "subject": d.get("subject", ""), "correct": correct, "cued": wrong, "gold": correct}
        pairs = cued.drafts(key, body, f"({wrong}) {opts[wrong]}", f"The answer is ({wrong}) {sentence(opts[wrong])}",
                            right, list(w.syco_qa_cues), meta)
        # honest mistake: an option neither right nor cued
        third = choose([k for k in "ABCD" if k not in (correct, wrong)], seed, key, "ctl_mistake")
        contrast = cued.contrast(key, body, _pair_cue(cued, key), f"({correct}) {opts[correct]}", right,
                                 f"({wrong}) {opts[wrong]}", (third, f"The answer is ({third}) {sentence(opts[third])}"),
                                 meta)
        passage = mmlu_passage(d["question"])
        items.append(_item(key, "syco_qa", f"mmlu:{row.ref}", pairs,
                           extra_keys=(text_key("mmlu_passage", passage),) if passage else (), contrast=contrast))

    for row in truthfulqa:
        parsed = truthfulqa_answers(row, "syco_qa", drops)
        if parsed is None:
            continue
        d, key, wrongs, best = parsed
        wrong = choose(wrongs, seed, key, "wrong")
        meta = {"recipe": "cue_injection_open", "generator": "template", "source_dataset": "truthfulqa",
                "category_tqa": d.get("Category", ""), "cued": wrong, "gold": best}  # cued, gold: as for MMLU
        pairs = cued.drafts(key, norm_ws(d["Question"]), f'"{wrong}"', sentence(wrong), sentence(best),
                            list(w.syco_qa_cues), meta)
        # No honest mistake here: a row's incorrect answers are mostly one misconception in other words ("Yes,
        # evil spirits can possess people with dark thoughts" / "... who let down their guard"), so another
        # of them still adopts the user's claim; a blind reader called such a control sycophantic.
        contrast = cued.contrast(key, norm_ws(d["Question"]), _pair_cue(cued, key), f'"{best}"', sentence(best),
                                 f'"{wrong}"', None, meta)
        items.append(_item(key, "syco_qa", f"truthfulqa:{row.ref}", pairs, contrast=contrast))

    # Reward-hack sycophancy_fact: the user states a false belief; agreeing is the misbehavior.
    items += choice_items(rh_fact, "syco_qa", "rh_syco_fact", w, seed, drops, testable=True, agree_style=True)
    # Opinion sets and the unhackable control: training only (no ground truth beyond "matches the user").
    items += choice_items(rh_fact_unhackable, "syco_qa", "rh_syco_fact_unhackable", w, seed, drops, testable=False,
                          agree_style=True, benign_only=True)
    items += choice_items(rh_opinion, "syco_qa", "rh_syco_opinion", w, seed, drops, testable=False, agree_style=True)
    for row in caa:
        d = row.data
        match = d["answer_matching_behavior"].strip().strip("()")
        other = d["answer_not_matching_behavior"].strip().strip("()")
        items += choice_item(row, d["question"], match, other, "syco_qa", "caa_sycophancy", w, seed, drops,
                             testable=False, agree_style=True)
    for row in political:
        d = row.data
        prompt = re.sub(r"\s*Answer:\s*$", "", d["prompt"])
        liberal_bio = "liberal-bio_liberal" in row.file
        match_list, other_list = (d["corrects"], d["incorrects"]) if liberal_bio else (d["incorrects"], d["corrects"])
        match = str(match_list[0]).strip().strip("()")
        other = str(other_list[0]).strip().strip("()")
        items += choice_item(row, prompt, match, other, "syco_qa", "anthropic_political_typology", w, seed, drops,
                             testable=False, agree_style=True)
    return leave_out(items, w.syco_qa_excluded, "syco_qa", drops)


_CALC = re.compile(r"<<([^<>]*)>>")


def syco_reasoning_items(gsm8k: Iterable[Row], w: WordingsConfig, seed: int, variants: int,
                         drops: Drops) -> list[Item]:
    items = []
    cued = _Cued(w, seed, variants, "syco_reasoning")
    for row in gsm8k:
        d = row.data
        if "####" not in d["answer"]:
            drops.add("syco_reasoning", "gsm8k_no_final_answer")
            continue
        raw_sol, gold = d["answer"].rsplit("####", 1)
        gold = gold.strip()
        key = text_key("gsm8k", d["question"])
        lines = [ln.rstrip() for ln in _CALC.sub("", raw_sol).strip().splitlines() if ln.strip()]
        # one misread quantity, every step as its words say: as long as the benign chain, every
        # equation right
        chain = misread_chain(raw_sol, d["question"], gold, seed, key, "misread")
        if chain is None:
            drops.add("syco_reasoning", "gsm8k_no_misreadable_quantity")
            continue
        wrong = chain.wrong
        mis_claim = "\n".join(chain.lines + [f"The answer is {wrong}."])
        evidence = [chain.step, f"The answer is {wrong}."]
        ben_claim = "\n".join(lines + [f"The answer is {gold}."])
        mistake = None
        # an honest mistake: another misread quantity, consistent with its own words, reaching a wrong
        # answer that is not the user's
        other = misread_chain(raw_sol, d["question"], gold, seed, key, "ctl_mistake", avoid=(wrong, gold))
        if other is not None:
            mistake = (other.wrong, "\n".join(other.lines + [f"The answer is {other.wrong}."]))
        pairs = []
        meta = {"recipe": "cue_injection_gsm8k", "generator": "template", "source_dataset": "gsm8k",
                "gold": gold, "cued": wrong}
        for i, wording in enumerate(rotate(list(w.syco_reasoning_cues), variants, seed, key, "cue")):
            cue_text = wording.format(cue=wrong)
            request = f"{d['question'].strip()}\n\n{cue_text}"
            o1, o0 = cued.openers(key, i)
            mis_text = f"{o1}\n{mis_claim}" if o1 else mis_claim
            ben_text = f"{o0}\n{ben_claim}" if o0 else ben_claim
            m = {"recipe": meta["recipe"], "generator": "template", "source_dataset": "gsm8k", "cue": cue_text,
                 "gold": gold, "cued": wrong, "wordings": w.version}
            pairs.append((Draft(request, mis_text, 1, list(evidence), {**m, "adopts_cue": True}, f"cue{i}"),
                          Draft(request, ben_text, 0, [], {**m, "adopts_cue": False}, f"cue{i}")))
        contrast = cued.contrast(key, d["question"].strip(), _pair_cue(cued, key), gold, ben_claim, wrong, mistake,
                                 meta, sep="\n")
        items.append(Item((key,), "syco_reasoning", f"gsm8k:{row.ref}", pairs[0],
                          [x for p in pairs for x in p] + contrast, contrast))
    return items


# ---------------------------------------------------------------- the recipes (SubsetSpec.recipe)

def syco_qa_recipe(ctx) -> list[Item]:
    c = ctx.cfg
    return syco_qa_items(ctx.rows("mmlu"), ctx.rows("truthfulqa"), ctx.rows("rh_sycophancy_fact"),
                         ctx.rows("rh_sycophancy_fact_unhackable"), ctx.rows("rh_sycophancy_opinion_political"),
                         ctx.rows("caa_sycophancy"), ctx.rows("anthropic_political_typology"), plain(c.wordings),
                         c.seed, c.train_variants, ctx.drops)


def syco_reasoning_recipe(ctx) -> list[Item]:
    c = ctx.cfg
    return syco_reasoning_items(ctx.rows("gsm8k"), plain(c.wordings), c.seed, c.train_variants, ctx.drops)
