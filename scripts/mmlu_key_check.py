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

import json
import random
import sys
from pathlib import Path

CONFIDENT = 0.6


def make(build: str, out: str, seed: int = 5, parts: int = 2, skip: tuple[str, ...] = ()) -> None:
    if Path(out).exists() and any(Path(out).iterdir()):
        raise SystemExit(f"{out} is not empty: a key check goes to a directory of its own (its parts are appended to)")
    Path(out).mkdir(parents=True, exist_ok=True)
    seen = {v["source"] for k in skip for v in json.loads(Path(k).read_text()).values()}
    items = []
    for line in Path(build, "test.jsonl").open():
        s = json.loads(line)
        if s["subset"] != "syco_qa" or s["label"] != 1 or not s["source"].startswith("mmlu:") or s["source"] in seen:
            continue
        m = s["meta"]
        if not s["request"].endswith(m["cue"]):
            raise SystemExit(f"{s['id']}: the request does not end with its cue; is this a syco_qa MMLU sample?")
        items.append({"source": s["source"], "subject": m["subject"], "key": m["correct"], "cued": m["cued"],
                      "question": s["request"][:-len(m["cue"])].rstrip()})
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


def decide(out: str) -> dict:
    key = json.loads(Path(out, "key.json").read_text())
    answers = {}
    for f in sorted(Path(out).glob("part*/answers.jsonl")):
        for line in f.open():
            a = json.loads(line)
            answers[a["qid"]] = a
    if set(answers) != set(key):
        raise SystemExit(f"answers for {len(answers)} of {len(key)} questions: missing {sorted(set(key) - set(answers))[:5]}")
    decisions = {}
    for qid, k in sorted(key.items()):
        a = answers[qid]
        why = None
        if a["broken"]:
            why = "marked broken"
        elif a["answer"] == k["cued"]:
            why = f"the checker answers the cued ({k['cued']}), not MMLU's key ({k['key']})"
        elif a["answer"] != k["key"] and a["confidence"] >= CONFIDENT:
            why = f"MMLU's key ({k['key']}) is likely wrong: the checker answers ({a['answer']}) at {a['confidence']}"
        decisions[qid] = {**k, "answer": a["answer"], "confidence": a["confidence"], "broken": a["broken"],
                          "reason": a["reason"], "left_out": why}
    Path(out, "decisions.json").write_text(json.dumps(decisions, indent=1) + "\n")
    left = {d["source"]: (qid, d["left_out"]) for qid, d in decisions.items() if d["left_out"]}
    print(f"# {len(left)} of {len(decisions)} rows left out", file=sys.stderr)
    for source, (qid, why) in sorted(left.items()):  # the YAML lines of wordings.syco_qa_excluded
        print(f"  {json.dumps(source)}: {json.dumps(f'key check {Path(out).name}/{qid}: {why}')}")
    return decisions


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[0] == "make":
        opts, rest = {}, list(argv[3:])
        while rest:
            flag = rest.pop(0)
            if flag == "--skip":
                opts.setdefault("skip", ())
                opts["skip"] += (rest.pop(0),)
            elif flag in ("--seed", "--parts"):
                opts[flag[2:]] = int(rest.pop(0))
            else:
                raise SystemExit(f"unknown option {flag}")
        make(argv[1], argv[2], **opts)
    elif len(argv) == 2 and argv[0] == "decide":
        decide(argv[1])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
