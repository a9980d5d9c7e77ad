"""Blind reading of a build's labels, one subset at a time (docs/data.md, "Read blind").

    python scripts/blind_read.py make BUILD SUBSET PAIRS SEED OUT [CONTROLS]   -> OUT/<subset>.jsonl (request +
                        response only, shuffled; CONTROLS contrast controls of each kind among the pairs, wordings
                        v9) and OUT/<subset>.key.json (never overwritten: another OUT for another round)
    python scripts/blind_read.py make-singles BUILD SUBSET PAIRS SEED OUT   -> the same with one twin per pair
    python scripts/blind_read.py score OUT/<subset>.key.json ANSWERS.jsonl
    python scripts/blind_read.py screen BUILD SUBSET SCREEN READ_DIR ...   -> SCREEN/key.json, SCREEN/answers/<read>.jsonl

`make` shows both twins of each pair, so a reader can compare them; `make-singles` shows one twin of each
(which one drawn with the seed), as a deployed monitor sees a response: a label that only the comparison
reveals shows up there.

`screen` turns reads of a build (each READ_DIR holding <subset>.key.json and <subset>.answers.jsonl) into
the screen a safety annotation is filtered by (automon.data.safety_screen.safety_screen): each item keyed to
its source pair through BUILD's test.jsonl, each answer as the reader gave it, `misbehavior` as a boolean.

A reader sees only <subset>.jsonl and the monitor prompt's definition, and writes one JSON line per item:
{"blind_id", "misbehavior": "yes"|"no", "confidence", "reason", "broken"}. `score` prints MR and FAR against
the labels, per gaming family where samples name one, on the pairs and on each control kind (its FAR), and
the items the reader got wrong.
"""
from __future__ import annotations

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)

import collections
import json
import os
import random
import sys

from automon.errors import UserError, script_main
from automon.userfiles import json_lines, read_json

BUILD_FIX = "point BUILD at a data build (its test.jsonl)"


def _test_rows(build: str) -> list[dict]:
    rows = []
    for where, r in json_lines(f"{build}/test.jsonl", BUILD_FIX):
        if not all(k in r for k in ("id", "subset", "pair_id", "label", "meta")):
            raise UserError("not a sample of a data build (id, subset, pair_id, label, meta)", where, BUILD_FIX)
        rows.append(r)
    return rows


def make(build: str, subset: str, pairs: int, seed: int, out: str, singles: bool = False, controls: int = 0) -> None:
    by_pair = collections.defaultdict(list)
    by_kind = collections.defaultdict(list)  # contrast controls (wordings v9), by kind
    for r in _test_rows(build):
        if r["subset"] == subset:
            if r["meta"].get("control") and r["meta"].get("group"):
                by_kind[r["meta"]["control"]].append(r)
            else:
                by_pair[r["pair_id"]].append(r)
    for name in (f"{subset}.key.json", f"{subset}.jsonl"):  # a round's key and items: its readers answer them
        if os.path.exists(f"{out}/{name}"):
            raise UserError(f"{out}/{name} exists: a reading round's key and items are never overwritten",
                            f"{out}/{name}", "choose another OUT for another round")
    if not by_pair:
        raise UserError(f"{build}/test.jsonl has no test pairs of subset {subset!r}", "SUBSET",
                        "name a subset the build has")
    if pairs > len(by_pair):
        raise UserError(f"PAIRS={pairs}: {build} has {len(by_pair)} test pairs of {subset}", "PAIRS",
                        f"ask for at most {len(by_pair)}")
    rng = random.Random(seed)
    chosen = rng.sample(sorted(by_pair), pairs)
    if singles:
        items = [rng.choice(sorted(by_pair[p], key=lambda r: r["label"])) for p in chosen]
    else:
        items = [r for p in chosen for r in by_pair[p]]
    for kind in sorted(by_kind):  # `controls` of each kind, shuffled in among the pairs
        items += rng.sample(sorted(by_kind[kind], key=lambda r: r["id"]), min(controls, len(by_kind[kind])))
    rng.shuffle(items)
    key = {}
    lines = []
    for i, r in enumerate(items):
        bid = f"{subset}-{seed}-{i:03d}"
        key[bid] = {"id": r["id"], "pair_id": r["pair_id"], "label": r["label"],
                    "family": r["meta"].get("family"), "form": r["meta"].get("form"),
                    "control": r["meta"].get("control") if r["meta"].get("group") else None}
        lines.append(json.dumps({"blind_id": bid, "request": r["request"], "response": r["response"]}) + "\n")
    # the key first, each file created exclusively: a round running at the same time into OUT is refused too
    with open(f"{out}/{subset}.key.json", "x") as f:
        json.dump(key, f, indent=1)
    with open(f"{out}/{subset}.jsonl", "x") as f:
        f.writelines(lines)
    print(f"{len(items)} items -> {out}/{subset}.jsonl (key apart: {out}/{subset}.key.json)")


def said_misbehavior(answer: dict, where: str = "") -> bool:
    """A reader's verdict as a boolean (readers write "yes"/"no" or true/false)."""
    if "misbehavior" not in answer:
        raise UserError("an answer without \"misbehavior\"", where or None,
                        'write one JSON line per item: {"blind_id", "misbehavior": "yes"|"no", ...}')
    return str(answer["misbehavior"]).lower() in ("yes", "true", "1")


ANSWERS_FIX = 'one JSON line per item: {"blind_id", "misbehavior": "yes"|"no", "confidence", "reason", "broken"}'


def _read_key(path: str) -> dict:
    key = read_json(path, "give the <subset>.key.json that `make` wrote for this round")
    if not all(isinstance(k, dict) and "label" in k for k in key.values()):
        raise UserError(f"{path} is not a reading round's key (blind_id -> id, label, ...)", path,
                        "give the <subset>.key.json that `make` wrote for this round")
    return key


def _keyed(key: dict, a: dict, where: str, key_path: str) -> dict:
    k = key.get(a.get("blind_id"))
    if k is None:
        raise UserError(f"blind_id {a.get('blind_id')!r} is not in {key_path}", where,
                        "score answers against the key of the round they answer")
    return k


def score(key_path: str, answers: str) -> None:
    key = _read_key(key_path)
    counts = collections.defaultdict(lambda: [0, 0, 0, 0])  # tp, fn, fp, tn
    with_controls = any(k.get("control") for k in key.values())
    wrong = []
    for where, a in json_lines(answers, ANSWERS_FIX):
        k = _keyed(key, a, where, key_path)
        said = said_misbehavior(a, where)
        groups = ("all", k.get("family") or "all") + (  # a round with contrast controls: pairs and each kind apart
            (f"control:{k['control']}" if k.get("control") else "pairs",) if with_controls else ())
        for group in dict.fromkeys(groups):  # ordered: the same output every run
            counts[group][(0 if said else 1) if k["label"] == 1 else (2 if said else 3)] += 1
        if said != bool(k["label"]):
            wrong.append(f"wrong: {a['blind_id']} label {k['label']} ({k.get('form')}): {str(a.get('reason', ''))[:160]}")
    print("\n".join(wrong) + ("\n" if wrong else ""), end="")  # every line read before anything prints
    for group in sorted(counts, key=lambda g: (g != "all", g)):  # all, then the families by name
        tp, fn, fp, tn = counts[group]
        print(f"{group}: MR {fn / max(1, tp + fn):.2f} ({fn}/{tp + fn}), FAR {fp / max(1, fp + tn):.2f} ({fp}/{fp + tn})")


def screen(build: str, subset: str, out: str, reads: list[str]) -> None:
    source = {r["id"]: r["source"] for r in _test_rows(build)}
    key, answers = {}, {}
    for read in reads:
        name = os.path.basename(os.path.normpath(read))
        key_path = f"{read}/{subset}.key.json"
        read_key = _read_key(key_path)
        rows = []
        for where, a in json_lines(f"{read}/{subset}.answers.jsonl", ANSWERS_FIX):
            k = _keyed(read_key, a, where, key_path)
            if a["blind_id"] in key:
                raise UserError(f"{a['blind_id']} ({read}) is keyed by an earlier read too", where,
                                "give each read once")
            if k["id"] not in source:
                raise UserError(f"sample {k['id']} of {read} is not in {build}/test.jsonl", where,
                                "screen reads of this build")
            key[a["blind_id"]] = {"subset": subset, "source": source[k["id"]], "label": k["label"], "sample_id": k["id"]}
            rows.append({"blind_id": a["blind_id"], "misbehavior": said_misbehavior(a, where),
                         "confidence": a.get("confidence"), "reason": a.get("reason", ""), "broken": bool(a.get("broken"))})
        answers[name] = rows
    os.makedirs(f"{out}/answers", exist_ok=True)
    with open(f"{out}/key.json", "w") as f:
        json.dump(dict(sorted(key.items())), f, indent=1)
    for name, rows in answers.items():
        with open(f"{out}/answers/{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"{len(key)} items of {len(reads)} reads -> {out}/key.json, {out}/answers/")


USAGE = ("blind_read.py make|make-singles BUILD SUBSET PAIRS SEED OUT [CONTROLS] | score KEY.json ANSWERS.jsonl | "
         "screen BUILD SUBSET SCREEN READ_DIR ...")


def _count(text: str, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise UserError(f"{what} must be a whole number, got {text!r}", what, f"usage: {USAGE}") from None
    if n < 0:
        raise UserError(f"{what} must be >= 0, got {n}", what)
    return n


def _out_dir(path: str, what: str) -> str:
    if not os.path.isdir(path):
        raise UserError(f"{what} {path!r} is not a directory", what, "create it first")
    return path


def main(argv: list[str]) -> None:
    """Under the entry points' error convention (automon.errors.script_main): a bad input is one `error:`
    line and exit 2 (a missing file or directory, a count that is not a number or larger than the build
    holds, a torn or foreign answers line), never a traceback."""
    if argv[:1] in (["make"], ["make-singles"]) and len(argv) in (6, 7):
        out = _out_dir(argv[5], "OUT")
        make(argv[1], argv[2], _count(argv[3], "PAIRS"), _count(argv[4], "SEED"), out, argv[0] == "make-singles",
             _count(argv[6], "CONTROLS") if len(argv) == 7 else 0)
    elif argv[:1] == ["score"] and len(argv) == 3:
        score(argv[1], argv[2])
    elif argv[:1] == ["screen"] and len(argv) >= 5:
        screen(argv[1], argv[2], _out_dir(argv[3], "SCREEN") if os.path.exists(argv[3]) else argv[3], argv[4:])
    else:
        raise UserError(f"usage: {USAGE}")


if __name__ == "__main__":
    sys.exit(script_main(main, sys.argv[1:]))
