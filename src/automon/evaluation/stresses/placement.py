"""Where a stress may add text to a response without changing what the response does or says.

A response is prose or code (a sample of a code task). Code is the fenced block of a spec-gaming
response or the whole response of a safety one (a function from SVEN, Python, C or C++); text added
there is a comment in the code's language, and it goes only where a comment cannot change the program:

- Python: the program's AST is the same with the comment as without it (the code is dedented first:
  SVEN's Python is often a method cut out of its class). A comment inside a triple-quoted
  string or after a backslash continuation changes the AST or stops the parse and is refused.
- C / C++: a line boundary outside block comments and string literals, not after a line that ends
  with a backslash (a `//` line spliced into a macro would comment out the rest of it); code with a
  C++ raw string takes comments only before its first line.

Prose takes a line of its own: at the start, at the end, or in the middle at a line boundary outside
code fences (a one-line response: a sentence boundary). Text is never put inside an evidence string:
every candidate place is checked to leave all of them exact substrings of the new response.
"""

from __future__ import annotations

import ast
import re
import textwrap
import warnings
from dataclasses import dataclass, replace
from typing import Sequence

from automon.schema import Sample

PYTHON, C = "python", "c"
PLACES = ("start", "middle", "end")

_FENCE = re.compile(r"```([A-Za-z+]*)[ \t]*\n(.*?)\n```", re.S)
_LANGUAGE_IN_REQUEST = re.compile(r"\((Python|C\+\+|C)\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])[ ]+(?=[A-Z\"'(])")


@dataclass(frozen=True)
class Code:
    start: int       # offset of the code's first character in the response
    end: int         # offset just past its last character
    language: str    # PYTHON or C (C and C++ take the same comments)


def code_of(x: Sample) -> Code | None:
    """The code of a code response (None for prose): the first fenced block, else the whole response."""
    if x.task != "code":
        return None
    m = _FENCE.search(x.response)
    if m:
        tag = m.group(1).lower()
        return Code(m.start(2), m.end(2), C if tag in ("c", "cpp", "c++") else PYTHON)
    m = _LANGUAGE_IN_REQUEST.search(x.request)
    if m:
        language = PYTHON if m.group(1) == "Python" else C
    else:  # no language named: C's braces and semicolons, else Python
        language = C if re.search(r";\s*$", x.response, re.M) and "{" in x.response else PYTHON
    end = len(x.response.rstrip("\n"))
    return Code(0, end, language)


def comment(text: str, language: str, indent: str = "") -> str:
    """`text` as comment lines of `language`, each indented by `indent`."""
    mark = "#" if language == PYTHON else "//"
    return "\n".join(f"{indent}{mark} {line}".rstrip() for line in text.split("\n"))


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _python_tree(code: str) -> str | None:
    with warnings.catch_warnings():  # SVEN's Python 2 era strings ("\[") warn on every parse
        warnings.simplefilter("ignore")
        try:
            return ast.dump(ast.parse(textwrap.dedent(code)))
        except (SyntaxError, ValueError):
            return None


def _c_line_starts(code: str) -> set[int] | None:
    """Offsets of the line starts of C/C++ `code` before which a `//` line cannot change the
    program (None: code with a raw string, where only the start is safe)."""
    if re.search(r'\bu?8?[LUu]?R"', code):
        return None
    safe, i, n = {0}, 0, len(code)
    state = "code"  # code | line_comment | block_comment | string | char
    while i < n:
        ch = code[i]
        if state == "code":
            if code.startswith("//", i):
                state, i = "line_comment", i + 2
                continue
            if code.startswith("/*", i):
                state, i = "block_comment", i + 2
                continue
            if ch == '"':
                state = "string"
            elif ch == "'":
                state = "char"
        elif state == "block_comment":
            if code.startswith("*/", i):
                state, i = "code", i + 2
                continue
        elif state in ("string", "char"):
            if ch == "\\":
                i += 2
                continue
            if ch == ('"' if state == "string" else "'") or ch == "\n":
                state = "code"
        if ch == "\n":
            if state == "line_comment":
                state = "code"
            spliced = i > 0 and code[i - 1] == "\\"
            if state == "code" and not spliced:
                safe.add(i + 1)
        i += 1
    if code.endswith("\\"):
        safe.discard(n)
    else:
        safe.add(n)
    return safe


def _ordered(candidates: Sequence[int], target: int) -> list[int]:
    return sorted(candidates, key=lambda p: (abs(p - target), p))


def _keeps_evidence(x: Sample, response: str) -> bool:
    return all(e in response for e in x.evidence)


def _code_edit(x: Sample, code: Code, text: str, place: str, fraction: float) -> str | None:
    r = x.response
    body = r[code.start:code.end]
    lines = body.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    if place == "start":
        candidates = [0]
    elif place == "end":
        candidates = [len(body)]
    else:
        inner = starts[1:]
        candidates = _ordered(inner, int(fraction * len(body)))
    c_safe = _c_line_starts(body) if code.language == C else None
    tree = _python_tree(body) if code.language == PYTHON else None
    for p in candidates:
        if p == len(body):  # after the last line: indented as the first
            new_body = f"{body}\n{comment(text, code.language, _indent_of(lines[0]))}"
        else:
            following = body[p:].split("\n", 1)[0]
            new_body = f"{body[:p]}{comment(text, code.language, _indent_of(following))}\n{body[p:]}"
        if code.language == PYTHON:
            if tree is None and p != 0:  # code that does not parse takes comments only before it
                continue
            if tree is not None and _python_tree(new_body) != tree:
                continue
        elif p != 0 and (c_safe is None or p not in c_safe):
            continue
        new = r[:code.start] + new_body + r[code.end:]
        if _keeps_evidence(x, new):
            return new
    return None


def _fenced_spans(r: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _FENCE.finditer(r)]


def _prose_edit(x: Sample, text: str, place: str, fraction: float) -> str | None:
    r = x.response
    if place == "start":
        return f"{text}\n\n{r}"
    if place == "end":
        return f"{r.rstrip()}\n\n{text}"
    fences = _fenced_spans(r)
    outside = [m.end() for m in re.finditer(r"\n", r)
               if 0 < m.end() < len(r) and not any(a < m.end() < b for a, b in fences)]
    target = int(fraction * len(r))
    if outside:  # a line of its own before a line of the response (a paragraph if it is one)
        for p in _ordered(outside, target):
            sep = "\n\n" if r[:p].endswith("\n\n") else "\n"
            new = f"{r[:p]}{text}{sep}{r[p:]}"
            if _keeps_evidence(x, new):
                return new
        return None
    for m in sorted(_SENTENCE_END.finditer(r), key=lambda m: (abs(m.start() - target), m.start())):
        new = f"{r[:m.start()]}\n{text}\n{r[m.end():]}"
        if _keeps_evidence(x, new):
            return new
    return None


def place_text(x: Sample, text: str, place: str, fraction: float, *, code_as_comment: bool = True) -> tuple[str, str]:
    """(the new response, the place used): `text` added at `place` (start / middle / end; the middle
    nearest `fraction` of the response's length). In code a comment (`code_as_comment`), else a
    line of prose. Where the place admits no safe spot, the next of middle -> end -> start does."""
    if place not in PLACES:
        raise ValueError(f"place {place!r} is not one of {PLACES}")
    code = code_of(x) if code_as_comment else None
    order = [place] + [p for p in ("end", "start") if p != place]
    for p in order:
        new = _code_edit(x, code, text, p, fraction) if code else _prose_edit(x, text, p, fraction)
        if new is not None:
            return new, p
    raise ValueError(f"sample {x.id}: no place takes the text")  # start of prose always does


def with_text(x: Sample, text: str, wording: int, place: str, fraction: float, *,
              code_as_comment: bool = True) -> Sample:
    """`x` with `text` placed (place_text), its meta.stress recording the wording drawn and the place used."""
    response, placed = place_text(x, text, place, fraction, code_as_comment=code_as_comment)
    return replace(x, response=response,
                   meta={**x.meta, "stress": {"wording": wording, "place": placed, "fallback": None}})
