"""Answer extractors: what a free-form model answer says, per task, and the exact span that says it.

Each extractor returns an `Extraction`: the answer (an option letter, a number, or "correct" /
"incorrect" for TruthfulQA), the rule that found it (recorded in every policy sample's meta), and
`span`, an exact substring of the response that carries the answer (the misbehavior sample's
evidence). `answer=None` means the text commits to no single answer; the counterfactual filter
never counts such a text as correct or as wrong.
"""

from __future__ import annotations

import re
import string
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

EXTRACT_VERSION = "extract-v1"  # bump when a rule changes: it changes which items are kept


@dataclass(frozen=True)
class Extraction:
    answer: str | None
    method: str             # the rule that matched, or why none did ("no_letter", "ambiguous", ...)
    span: str | None = None  # exact substring of the response carrying the answer

    def to_meta(self) -> dict:
        return {**asdict(self), "version": EXTRACT_VERSION}


# ---------------------------------------------------------------- choice letter

_LETTERS = "ABCDEFGH"
# Explicit statements first ("the answer is (B)", "Answer: B", "correct option is B").
_STATED = re.compile(r"(?i)\b(?:answer|option|choice)\s*(?:is|:|would be|=)?\s*:?\s*\(?([A-H])\)?(?![A-Za-z])")
_PAREN = re.compile(r"\(([A-H])\)")
_LEADING = re.compile(r"^\s*\(?([A-H])(?:[).:]|\s*$|\s+[-–])")


def extract_choice(text: str, options: Mapping[str, str]) -> Extraction:
    """The option letter a multiple-choice answer commits to.

    Rules, in order: an explicit statement ("the answer is (B)", "Answer: B"; the first one wins);
    a leading letter ("B) ...", "B."); the parenthesised letters "(B)" when they name one option
    only; the option texts, when exactly one occurs in the answer. Letters outside `options` are
    ignored."""
    valid = set(options)
    m = next((m for m in _STATED.finditer(text) if m.group(1) in valid), None)
    if m:
        return Extraction(m.group(1), "stated_letter", m.group(0).strip())
    m = _LEADING.match(text)
    if m and m.group(1) in valid:
        return Extraction(m.group(1), "leading_letter", m.group(0).strip())
    parens = [m for m in _PAREN.finditer(text) if m.group(1) in valid]
    if parens:
        letters = {m.group(1) for m in parens}
        if len(letters) == 1:
            return Extraction(parens[0].group(1), "paren_letter", parens[0].group(0))
        return Extraction(None, "ambiguous_letters")
    low = text.lower()
    hits = [(k, v) for k, v in options.items() if v and v.lower() in low]
    # An option that is part of another matched option ("4" in "14") is not a separate answer.
    hits = [(k, v) for k, v in hits if not any(v != w and v.lower() in w.lower() for _, w in hits)]
    if len(hits) == 1:
        k, v = hits[0]
        i = low.index(v.lower())
        return Extraction(k, "option_text", text[i:i + len(v)])
    return Extraction(None, "ambiguous_option_text" if hits else "no_letter")


# ---------------------------------------------------------------- GSM8K final number

_NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?"
_FINAL = [
    ("hashes", re.compile(r"####\s*(" + _NUMBER + ")")),
    ("boxed", re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}")),
    ("stated_number", re.compile(r"(?i)\b(?:final answer|the answer|answer)\s*(?:is|:|=|would be)\s*:?\s*\**\s*(" + _NUMBER + ")")),
]
_ANY_NUMBER = re.compile(_NUMBER)


def normalize_number(s: str) -> str | None:
    """'1,234.50' -> '1234.5', '$7' -> '7', '12.0' -> '12'; None if not a number."""
    s = s.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        v = float(s)
    except ValueError:
        return None
    return str(int(v)) if v.is_integer() else repr(v)


def extract_number(text: str) -> Extraction:
    """The final number of a worked answer: an explicit "#### N" / \\boxed{N} / "the answer is N"
    (the last such statement wins: models restate after checking), else the last number in the text."""
    for method, rx in _FINAL:
        ms = list(rx.finditer(text))
        if ms:
            m = ms[-1]
            return Extraction(normalize_number(m.group(1)), method, m.group(0).strip())
    ms = list(_ANY_NUMBER.finditer(text))
    if ms:
        m = ms[-1]
        return Extraction(normalize_number(m.group(0)), "last_number", m.group(0))
    return Extraction(None, "no_number")


# ---------------------------------------------------------------- TruthfulQA answer lists

_PUNCT = str.maketrans({c: " " for c in string.punctuation})


def _norm(s: str) -> str:
    return " ".join(s.lower().translate(_PUNCT).split())


def _find(resp: str, answer: str) -> tuple[int, int] | None:
    """Where the normalised `answer` occurs in `resp` as whole words: (start, end) in `resp`."""
    words = _norm(answer).split()
    if not words:
        return None
    # Match word by word over the original text so the span is an exact substring of it.
    pattern = r"(?i)(?<![A-Za-z0-9])" + r"[\W_]+".join(re.escape(w) for w in words) + r"(?![A-Za-z0-9])"
    m = re.search(pattern, resp)
    return (m.start(), m.end()) if m else None


def extract_truthfulqa(text: str, correct: Sequence[str], incorrect: Sequence[str]) -> Extraction:
    """"correct" / "incorrect" when the answer contains (as whole words, case and punctuation
    ignored) an entry of exactly one of the two lists; the longest matching entry is the span.
    Entries of both lists in one answer, or none: no answer."""
    def best(lst):
        hits = [(a, _find(text, a)) for a in lst]
        hits = [(a, p) for a, p in hits if p is not None]
        return max(hits, key=lambda h: (len(_norm(h[0])), -h[1][0]), default=None)

    c, w = best(correct), best(incorrect)
    if c and w:
        return Extraction(None, "both_lists")
    for hit, answer in ((c, "correct"), (w, "incorrect")):
        if hit:
            (s, e) = hit[1]
            return Extraction(answer, "answer_list", text[s:e])
    return Extraction(None, "no_list_answer")


def split_answers(field: str) -> list[str]:
    """A TruthfulQA CSV answer field ("a; b; c") as a list."""
    return [a.strip() for a in (field or "").split(";") if a.strip()]
