"""A key check of syco_qa's MMLU test questions (docs/data.md, "MMLU key check"; wordings v8's
syco_qa_excluded).

    python scripts/mmlu_key_check.py make BUILD OUT [--seed S] [--parts N] [--skip KEY.json ...]
        -> OUT/key.json (qid -> source row, subject, MMLU's key, the cued option) and OUT/partK/questions.jsonl
           (qid, subject, question with its options: no key, no cue), the questions of KEY.json files skipped
    python scripts/mmlu_key_check.py decide OUT
        -> OUT/decisions.json and, on stdout, the syco_qa_excluded entries the rule below gives

MMLU's keys are not all right (a question can lack the figure or program it names, or have a contested or
wrong key). In syco_qa such a question breaks the pair a monitor reads: when the user's cue is the answer
an informed reader would give, the sycophantic twin reads as agreeing with a correct user. A checker
answers every question without seeing the key or the cue (OUT/partK/answers.jsonl, one line per qid:
{"qid", "answer": "A".."D" | null, "confidence", "broken", "reason"}), and `decide` leaves a row out when

- the checker marks it broken (missing material, no or two right options, self-contradiction), or
- the checker's answer is the cued option (the misbehavior twin would read as right), or
- the checker's answer differs from the key with confidence >= 0.6 (the key is likely wrong).

Nothing else is read into the answers: a low-confidence disagreement stays (hard questions are not broken).
"""
from __future__ import annotations

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)

import json
import math
import random
import sys
from pathlib import Path

from automon.errors import UserError, script_main
from automon.userfiles import json_lines, read_json

CONFIDENT = 0.6
OPTIONS = ("A", "B", "C", "D")
USAGE = "mmlu_key_check.py make BUILD OUT [--seed S] [--parts N] [--skip KEY.json ...] | decide OUT"


def make(build: str, out: str, seed: int = 5, parts: int = 2, skip: tuple[str, ...] = ()) -> None:
    if parts < 1:
        raise UserError(f"--parts {parts} is out of range", "--parts", "use 1 or more parts")
    if Path(out).exists() and not Path(out).is_dir():
        raise UserError(f"OUT {out} is a file", "OUT", "name a new or empty directory")
    if Path(out).exists() and any(Path(out).iterdir()):
        raise UserError(f"{out} is not empty: a key check goes to a directory of its own (its parts are appended to)",
                        "OUT", "name a new or empty directory (another round: --skip the earlier rounds' key.json)")
    seen = {v["source"] for k in skip for v in read_json(k, "give the key.json of an earlier round").values()
            if isinstance(v, dict) and "source" in v}
    items = []
    fix = "point BUILD at a data build with syco_qa (its test.jsonl)"
    for where, s in json_lines(Path(build, "test.jsonl"), fix):
        if s.get("subset") != "syco_qa" or s.get("label") != 1 or not str(s.get("source", "")).startswith("mmlu:") \
                or s["source"] in seen:
            continue
        m = s.get("meta") or {}
        if not all(k in m for k in ("cue", "subject", "correct", "cued")) or not s["request"].endswith(m["cue"]):
            raise UserError(f"{s.get('id')}: not a syco_qa MMLU sample (its meta's cue, subject, correct, cued; the "
                            "request ending with its cue)", where, fix)
        items.append({"source": s["source"], "subject": m["subject"], "key": m["correct"], "cued": m["cued"],
                      "question": s["request"][:-len(m["cue"])].rstrip()})
    Path(out).mkdir(parents=True, exist_ok=True)
    random.Random(seed).shuffle(items)
    key = {}
    for i, it in enumerate(items):
        qid = f"q{i:03d}" if not skip else f"s{seed}q{i:03d}"  # a later round's qids never repeat round 1's
        key[qid] = {k: it[k] for k in ("source", "subject", "key", "cued")}
        part = Path(out, f"part{i % parts + 1}")
        part.mkdir(parents=True, exist_ok=True)
        with (part / "questions.jsonl").open("a") as f:
            f.write(json.dumps({"qid": qid, "subject": it["subject"], "question": it["question"]}) + "\n")
    Path(out, "key.json").write_text(json.dumps(key, indent=1) + "\n")
    if not items:
        print(f"0 questions: every MMLU question of {build}'s syco_qa test pairs is in the checks skipped")
    else:
        print(f"{len(items)} questions in {parts} parts -> {out}/part*/questions.jsonl (key apart: {out}/key.json)")


ANSWER_FIX = ('one line per qid: {"qid", "answer": "A".."D" or null, "confidence": a number in [0, 1], '
              '"broken": true|false, "reason"}')


def option(value: object) -> str | None:
    """An option letter as the key spells it (upper case; a checker may write "b" or " B "), None for null."""
    return None if value is None else str(value).strip().upper()


def _answer(a: dict, where: str) -> dict:
    """One checker line, checked: an unknown option or a confidence that is not a number is refused, not
    compared (a lower-case "b" once never matched the key's "B": every row read as a confident disagreement)."""
    answer, conf = option(a.get("answer")), a.get("confidence")
    if answer is not None and answer not in OPTIONS:
        raise UserError(f"qid {a.get('qid')}: answer {a.get('answer')!r} is not an option", where, ANSWER_FIX)
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not (0 <= conf <= 1) or math.isnan(conf):
        if not (answer is None and conf is None):
            raise UserError(f"qid {a.get('qid')}: confidence {conf!r} is not a number in [0, 1]", where, ANSWER_FIX)
    if not isinstance(a.get("broken", False), bool):
        raise UserError(f"qid {a.get('qid')}: broken {a.get('broken')!r} is not true or false", where, ANSWER_FIX)
    return {**a, "answer": answer, "broken": bool(a.get("broken", False)), "reason": a.get("reason", "")}


def decide(out: str) -> dict:
    key = read_json(Path(out, "key.json"), "give the OUT that `make` wrote")
    answers = {}
    for f in sorted(Path(out).glob("part*/answers.jsonl")):
        for where, a in json_lines(f, ANSWER_FIX):
            if a.get("qid") in answers:
                raise UserError(f"qid {a.get('qid')} is answered twice", where, "keep one line per qid")
            answers[a.get("qid")] = _answer(a, where)
    missing, extra = sorted(set(key) - set(answers)), sorted(set(answers) - set(key), key=str)
    if missing or extra:
        what = "; ".join(p for p in (f"{len(missing)} of {len(key)} questions unanswered (first: {missing[:5]})"
                                     if missing else "",
                                     f"answers to {len(extra)} qid(s) the key lacks: {extra[:5]}" if extra else "") if p)
        raise UserError(what, f"{out}/part*/answers.jsonl", "one answer line per question of key.json, no other")
    decisions = {}
    for qid, k in sorted(key.items()):
        a = answers[qid]
        why = None
        if a["broken"]:
            why = "marked broken"
        elif a["answer"] is not None and a["answer"] == option(k["cued"]):
            why = f"the checker answers the cued ({k['cued']}), not MMLU's key ({k['key']})"
        elif a["answer"] is not None and a["answer"] != option(k["key"]) and a["confidence"] >= CONFIDENT:
            why = f"MMLU's key ({k['key']}) is likely wrong: the checker answers ({a['answer']}) at {a['confidence']}"
        decisions[qid] = {**k, "answer": a["answer"], "confidence": a["confidence"], "broken": a["broken"],
                          "reason": a["reason"], "left_out": why}
    Path(out, "decisions.json").write_text(json.dumps(decisions, indent=1) + "\n")
    left = {d["source"]: (qid, d["left_out"]) for qid, d in decisions.items() if d["left_out"]}
    print(f"# {len(left)} of {len(decisions)} rows left out", file=sys.stderr)
    for source, (qid, why) in sorted(left.items()):  # the YAML lines of wordings.syco_qa_excluded
        print(f"  {json.dumps(source)}: {json.dumps(f'key check {Path(out).name}/{qid}: {why}')}")
    return decisions


def _int(flag: str, text: str | None) -> int:
    try:
        return int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{flag} needs a whole number, got {text!r}", flag, f"usage: {USAGE}") from None


def main(argv: list[str]) -> None:
    """Under the entry points' error convention (automon.errors.script_main): one `error:` line, exit 2."""
    if len(argv) >= 3 and argv[0] == "make":
        opts: dict = {}
        rest = list(argv[3:])
        while rest:
            flag = rest.pop(0)
            if flag == "--skip" and rest:
                opts["skip"] = opts.get("skip", ()) + (rest.pop(0),)
            elif flag in ("--seed", "--parts"):
                opts[flag[2:]] = _int(flag, rest.pop(0) if rest else None)
            else:
                raise UserError(f"unknown option {flag}", flag, f"usage: {USAGE}")
        make(argv[1], argv[2], **opts)
    elif len(argv) == 2 and argv[0] == "decide":
        decide(argv[1])
    else:
        raise UserError(f"usage: {USAGE}", None, "see the docstring of scripts/mmlu_key_check.py")


if __name__ == "__main__":
    sys.exit(script_main(main, sys.argv[1:]))
