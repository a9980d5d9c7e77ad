"""Text edits: replacements of spans of a text, applied together, and what a span of the text becomes
after them (the stresses' edits of a response: obfuscate's, located by the AST, and paraphrase's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Edit:
    start: int   # offsets in the text
    end: int
    text: str


def apply_edits(code: str, edits: Sequence[Edit]) -> str:
    out, last = [], 0
    for e in sorted(edits, key=lambda e: (e.start, e.end)):
        if e.start < last:
            raise ValueError("overlapping edits")
        out += [code[last:e.start], e.text]
        last = e.end
    out.append(code[last:])
    return "".join(out)


def map_span(code: str, start: int, end: int, edits: Sequence[Edit]) -> str | None:
    """The text of code[start:end] after the edits, or None when an edit crosses its boundary
    (an insertion exactly at a boundary stays outside)."""
    inside = []
    for e in edits:
        if e.start == e.end:
            outside = not start < e.start < end
        else:
            outside = e.end <= start or e.start >= end
            if not outside and (e.start < start or e.end > end):
                return None
        if not outside:
            inside.append(Edit(e.start - start, e.end - start, e.text))
    return apply_edits(code[start:end], inside)
