"""Gold evidence from a span-marking round: two blind readers mark the harmful passage(s) of each
misbehavior reply (annotations/<name>/reader_a|reader_b/answers.jsonl, one line per item:
{"id", "spans": [exact quotes], "not_harmful", "note"}); `evidence-import` measures their agreement
and writes the gold the build reads (annotations/<name>/gold.jsonl, automon.data.verdicts.load_gold).

    python data_build/annotate.py evidence-import name=safety_qa_evidence build=data/builds/default

Agreement is token-level: a response's tokens are its whitespace-separated words with their positions;
a reader marks the tokens any of their spans overlaps; the two readers' F1 over those token sets is
averaged over the items both marked (exact match: both gave the same set of quotes). The gold rule
(GOLD_RULE) keeps where the readers meet: the union of the spans that overlap a span of the other
reader, merged into one quote per overlapping run; where their spans do not meet, both readers'
passages (each is where a careful reader saw the harm); where one reader marked nothing (not_harmful),
the other's. An item both call not harmful gets no gold: a label question, listed in agreement.json.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from automon.data.verdicts import GOLD_FILE, AnnotationError, annotations_dir, response_digest

READERS = ("reader_a", "reader_b")
_ANSWER_KEYS = {"id", "spans", "not_harmful", "note"}
GOLD_RULE = ("where both readers marked spans that overlap: the union of each overlapping run of them (one "
             "quote per run; spans of either reader that meet none of the other's are left out); where their "
             "spans do not meet: every span of both; where one reader marked none (not_harmful): the other's; "
             "where neither did: no gold (a label question)")


@dataclass
class EvidenceImportConfig:
    name: str = "safety_qa_evidence"   # annotations/<name>: items.jsonl, reader_a/, reader_b/
    root: str = ""                     # where annotations/ is ("" = the repository's)
    build: str = "data/builds/default"  # the build whose test samples the items are (id -> source, text)


def word_spans(text: str) -> list[tuple[int, int]]:
    """The response's tokens: its whitespace-separated words as (start, end) character positions."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def char_ranges(text: str, quotes: list[str]) -> list[tuple[int, int]]:
    """Where each quote is in `text` (its first occurrence); every quote must be an exact substring."""
    out = []
    for q in quotes:
        at = text.find(q)
        if not q or at < 0:
            raise ValueError(f"span {q[:60]!r} is not an exact substring of the response")
        out.append((at, at + len(q)))
    return out


def marked_tokens(text: str, quotes: list[str]) -> set[int]:
    """The indices of the tokens (word_spans) any quote overlaps."""
    ranges = char_ranges(text, quotes)
    return {i for i, (s, e) in enumerate(word_spans(text)) if any(s < qe and qs < e for qs, qe in ranges)}


def token_f1(a: set[int], b: set[int]) -> float:
    """F1 of one reader's marked tokens against the other's (symmetric); two empty sets agree."""
    if not a and not b:
        return 1.0
    return 2 * len(a & b) / (len(a) + len(b))


def _runs(ranges: list[tuple[int, int, str]]) -> list[list[tuple[int, int, str]]]:
    """Overlapping character ranges (start, end, reader) grouped into runs, in text order."""
    runs: list[list[tuple[int, int, str]]] = []
    for r in sorted(ranges):
        if runs and r[0] < max(e for _, e, _ in runs[-1]):
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def gold_quotes(text: str, a: list[str], b: list[str]) -> tuple[list[str], str]:
    """(gold quotes, which branch of GOLD_RULE gave them) for one response and the readers' spans."""
    if not a and not b:
        return [], "neither"
    if not a or not b:
        return [q.strip() for q in (a or b)], "reader_a_only" if a else "reader_b_only"
    ranges = [(s, e, "a") for s, e in char_ranges(text, a)] + [(s, e, "b") for s, e in char_ranges(text, b)]
    runs = _runs(ranges)
    met = [r for r in runs if {who for _, _, who in r} == {"a", "b"}]
    rule = "overlap" if met else "disjoint"
    quotes = []
    for run in met or runs:
        q = text[min(s for s, _, _ in run):max(e for _, e, _ in run)].strip()
        if q not in quotes:
            quotes.append(q)
    return quotes, rule


def read_answers(path: Path, items: dict[str, str]) -> dict[str, dict]:
    """One reader's answers, every item once, every span an exact substring of its response."""
    if not path.is_file():
        raise AnnotationError(f"no answers at {path}", str(path), "the reader writes one JSON line per item there")
    got: dict[str, dict] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        row = json.loads(line)
        if not isinstance(row, dict) or not {"id", "spans", "not_harmful"} <= set(row) <= _ANSWER_KEYS:
            raise AnnotationError(f"the line's keys are {sorted(row) if isinstance(row, dict) else row!r}", where,
                                  f"write the keys {sorted(_ANSWER_KEYS)}")
        i = row["id"]
        if i not in items:
            raise AnnotationError(f"item {i!r} is not in items.jsonl", where, "answer only the exported items")
        if i in got:
            raise AnnotationError(f"item {i} is answered twice", where, "keep one line per item")
        if not isinstance(row["not_harmful"], bool) or not isinstance(row["spans"], list):
            raise AnnotationError("spans must be a list and not_harmful true or false", where, "fix the line")
        try:
            char_ranges(items[i], row["spans"])
        except ValueError as e:
            raise AnnotationError(f"item {i}: {e}", where, "copy the span from the response character for "
                                                          "character") from None
        got[i] = {"spans": list(row["spans"]), "not_harmful": row["not_harmful"], "note": row.get("note", "")}
    missing = sorted(set(items) - set(got))
    if missing:
        raise AnnotationError(f"{len(missing)} item(s) unanswered, e.g. {missing[0]}", str(path),
                              "answer every item of items.jsonl")
    return got


def agreement(items: dict[str, str], answers: dict[str, dict[str, dict]]) -> dict:
    """Token-level F1 between the readers, averaged over the items both marked; the exact-match share
    (same set of stripped quotes) over the same items; the items a reader calls not harmful."""
    a, b = (answers[r] for r in READERS)
    both = [i for i in sorted(items) if a[i]["spans"] and b[i]["spans"]]
    f1 = [token_f1(marked_tokens(items[i], a[i]["spans"]), marked_tokens(items[i], b[i]["spans"])) for i in both]
    exact = [{q.strip() for q in a[i]["spans"]} == {q.strip() for q in b[i]["spans"]} for i in both]
    return {
        "items": len(items),
        "both_marked": len(both),
        "token_f1_mean": round(sum(f1) / len(f1), 4) if f1 else None,
        "exact_match_share": round(sum(exact) / len(exact), 4) if exact else None,
        "tokens": "whitespace-separated words of the response with their positions; a reader marks every token "
                  "one of their spans overlaps",
        "not_harmful": {r: sorted(i for i in items if answers[r][i]["not_harmful"]) for r in READERS},
    }


def evidence_import(cfg: EvidenceImportConfig) -> dict:
    """Read annotations/<name>/items.jsonl and both readers' answers, check every item is a test sample
    of `build` with the same response, and write annotations/<name>/gold.jsonl and agreement.json."""
    folder = annotations_dir(cfg.root, cfg.name)
    rows = [json.loads(x) for x in (folder / "items.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    items = {r["id"]: r["response"] for r in rows}
    test = Path(cfg.build) / "test.jsonl"
    if not test.is_file():
        raise AnnotationError(f"no test.jsonl in build={cfg.build}", "build", "point it at the build the items "
                                                                              "were taken from")
    samples = {}
    with open(test, encoding="utf-8") as f:
        for line in f:
            s = json.loads(line)
            if s["id"] in items:
                samples[s["id"]] = s
    for i, text in items.items():
        s = samples.get(i)
        if s is None or s["response"] != text or s["label"] != 1:
            raise AnnotationError(f"item {i} is not a misbehavior test sample of {test} with this response",
                                  str(folder / "items.jsonl"), "export the items from that build")
    answers = {r: read_answers(folder / r / "answers.jsonl", items) for r in READERS}
    result = agreement(items, answers)
    rules: dict[str, int] = {}
    gold = []
    for i in sorted(items, key=lambda k: samples[k]["source"]):
        quotes, rule = gold_quotes(items[i], answers["reader_a"][i]["spans"], answers["reader_b"][i]["spans"])
        rules[rule] = rules.get(rule, 0) + 1
        gold.append({"id": i, "source": samples[i]["source"], "response_sha256": response_digest(items[i]),
                     "evidence": quotes, "rule": rule})
    (folder / GOLD_FILE).write_text("".join(json.dumps(g, ensure_ascii=False) + "\n" for g in gold), encoding="utf-8")
    result.update(rules=dict(sorted(rules.items())), gold_rule=GOLD_RULE, with_gold=sum(bool(g["evidence"]) for g in gold),
                  gold_sha256=hashlib.sha256((folder / GOLD_FILE).read_bytes()).hexdigest())
    (folder / "agreement.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result

