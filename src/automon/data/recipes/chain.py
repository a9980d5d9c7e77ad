"""A GSM8K solution with one plausible wrong step: one misread given quantity (`misread_chain`), the
sycophantic chain of syco_reasoning.

The sycophantic chain must not be findable from its surface: it is as long as the benign one, every
equation in it is arithmetically right, every operation is the one its words describe, and only
checking a step against the question shows the mistake. So `misread_chain` reads ONE number the
question gives as a nearby one (a digit off by one, or two digits transposed: 48 -> 47, 48 -> 84),
recomputes every step that uses it or a result derived from it, rewrites the visible expressions
and the prose that repeats those numbers, and returns the chain with the final answer it now
reaches (the number the user suggested). Candidates whose rewrite would leave a false equation, a
non-positive or ugly number (more than two decimals), or a number the chain cannot rewrite
consistently are rejected; None when no quantity qualifies.

GSM8K writes a step as `48/2 = <<48/2=24>>24`: the fenced `<<expr=value>>` is the calculator call,
the text before it its visible form. A visible expression is rewritten only when it has the same
numbers as the fenced one.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Iterator, Optional

from automon.data.recipes.common import short_hash

_FENCE = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?|\.\d+")
# The visible expression right before a fence: numbers joined by operators, then "=" and maybe "$".
_VISIBLE = re.compile(r"(\$?\d[\d,]*(?:\.\d+)?(?:\s*[-+*/x×]\s*\$?\d[\d,]*(?:\.\d+)?)+)\s*=\s*\$?\s*$")
_SHOWN_VALUE = re.compile(r"\s*\d[\d,]*(?:\.\d+)?")
# Visible equations anywhere in a chain, for the guard: a op b (op c ...) = d.
_EQUATION = re.compile(r"(\d[\d,]*(?:\.\d+)?(?:\s*[-+*/x×]\s*\$?\d[\d,]*(?:\.\d+)?)+)\s*=\s*\$?(\d[\d,]*(?:\.\d+)?)")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


# Both are pure functions of a string and called again and again on the same ones while misreadings
# are tried (each candidate re-evaluates the chain); cached, syco_reasoning's recipe takes half the time.
@lru_cache(maxsize=1 << 16)
def _frac(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


_PLAIN = str.maketrans({",": None, "$": None, "x": "*", "×": "*"})


@lru_cache(maxsize=1 << 16)
def _evaluate(expr: str) -> Optional[Fraction]:
    """Exact value of + - * / arithmetic over decimal literals; None for anything else."""
    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Fraction(str(node.value))
        raise ValueError(type(node).__name__)
    try:
        return walk(ast.parse(expr.translate(_PLAIN), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def _nice(v: Optional[Fraction]) -> bool:
    return v is not None and v > 0 and (v * 100).denominator == 1


def _show(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return f"{float(v):.2f}".rstrip("0").rstrip(".")


def _false_equations(text: str) -> int:
    return sum(1 for lhs, rhs in _EQUATION.findall(text) if _evaluate(lhs) != _frac(rhs))


@dataclass
class _Step:
    line: int
    start: int            # of the visible expression (or of the fence when it has none)
    end: int              # past the value shown after the fence
    expr: str             # the fenced expression
    visible: Optional[str]  # the visible expression, None when it does not mirror the fence
    value: Fraction


def _steps(lines: list[str]) -> list[_Step]:
    steps = []
    for li, ln in enumerate(lines):
        for m in _FENCE.finditer(ln):
            value = _evaluate(m.group(1))
            shown = _SHOWN_VALUE.match(ln, m.end())
            end = shown.end() if shown else m.end()
            vis = _VISIBLE.search(ln[:m.start()])
            visible = vis.group(1) if vis and _NUMBER.findall(vis.group(1)) == _NUMBER.findall(m.group(1)) else None
            steps.append(_Step(li, vis.start(1) if visible else m.start(), end, m.group(1), visible, value))
    return steps


def _rewrite_numbers(expr: str, changed: dict[Fraction, Fraction]) -> str:
    return _NUMBER.sub(lambda m: _show(changed[_frac(m.group(0))]) if _frac(m.group(0)) in changed else m.group(0),
                       expr)


def _parsed(solution: str, gold: str) -> Optional[tuple[list[str], list, Fraction]]:
    """(non-empty lines, computed steps, gold as a fraction) of a solution whose every step has a
    value and whose gold answer is a number; None otherwise (nothing to misread)."""
    lines = [ln.rstrip() for ln in solution.strip().splitlines() if ln.strip()]
    steps = _steps(lines)
    try:
        g = _frac(gold)
    except (ValueError, ZeroDivisionError):
        return None
    if not steps or any(s.value is None for s in steps):
        return None
    return lines, steps, g


# ---------------------------------------------------------------- one misread quantity
#
# (An operator swap, the wrong step of earlier wordings, could contradict the chain's own words:
# "share equally ... 21-3", "a total of 72*45".) The misread quantity keeps every operation the one its
# words describe, every equation right and every number the chain states the one it computes with;
# the one mistake is visible only against the question (it says 48).

# Values a word in a question can stand for (half, twice, a dozen, a week, per cent...): a chain may
# use one without the question writing it in digits, so a misread of such a value could also rewrite
# a "/2" that means "half". Never misread.
IMPLIED = frozenset(Fraction(n) for n in (1, 2, 3, 4, 7, 10, 12, 24, 52, 60, 100, 365, 1000))
# A given number next to these is a percentage, a fraction bar, a time of day or a ratio: left alone.
_NOT_A_QUANTITY = re.compile(r"^(\s*%|\s*percent|/|:|st\b|nd\b|rd\b|th\b)")


# Numbers a chain may also write in words ("Eight doses = 8 * 56"): a misread of 8 would leave the
# word behind, contradicting the digits beside it.
_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen twenty").split()
NUMBER_WORDS = {**{Fraction(i): w for i, w in enumerate(_WORDS)},
                **{Fraction(10 * i): w for i, w in zip(range(3, 10), "thirty forty fifty sixty seventy eighty ninety".split())}}


def _in_words(values: set[Fraction], text: str) -> bool:
    words = set(re.findall(r"[a-z]+", text.lower()))
    return any(NUMBER_WORDS.get(v) in words for v in values)


@dataclass(frozen=True)
class MisreadChain:
    lines: list[str]   # visible solution lines, fences removed
    wrong: str         # the final answer the chain reaches
    step: str          # the first visible line that uses the misread quantity
    given: str         # the quantity as the question states it
    read: str          # the quantity as the chain uses it


def _misreadings(text: str) -> list[str]:
    """Nearby readings of a number as written: one digit one up or down, or two adjacent digits
    transposed; no leading zero, no sign, the same decimal places. Trailing zeros stay (500 -> 400 or
    600, never 501): a misread keeps a round number round, so roundness does not mark the bent chain."""
    out = []
    digits = [i for i, ch in enumerate(text) if ch.isdigit()]
    while len(digits) > 1 and text[digits[-1]] == "0":
        digits.pop()
    for i in digits:
        for step in (-1, 1):
            d = int(text[i]) + step
            if 0 <= d <= 9 and not (d == 0 and i == digits[0] and len(digits) > 1 and "." not in text[:i]):
                out.append(text[:i] + str(d) + text[i + 1:])
    for i, j in zip(digits, digits[1:]):
        if j == i + 1 and text[i] != text[j] and not (i == digits[0] and text[j] == "0"):
            out.append(text[:i] + text[j] + text[i] + text[j + 1:])
    return list(dict.fromkeys(out))


def _given_quantities(question: str) -> dict[Fraction, str]:
    """Numbers the question states once, in digits, as a plain quantity: value -> its written form."""
    seen: dict[Fraction, list[str]] = {}
    for m in _NUMBER.finditer(question):
        text = m.group(0).rstrip(",")
        v = _frac(text)
        plain = not (_NOT_A_QUANTITY.match(question[m.start() + len(text):]) or question[:m.start()].endswith(("/", ":")))
        seen.setdefault(v, []).append(text if plain else "")
    # A value the question also writes in words ("8 apples and eight pears") may be a second quantity.
    return {v: forms[0] for v, forms in seen.items()
            if len(forms) == 1 and forms[0] and v not in IMPLIED and not _in_words({v}, question)}


def misread_chain(solution: str, question: str, gold: str, *parts: object, avoid: tuple[str, ...] = ()
                  ) -> Optional[MisreadChain]:
    """One misread quantity in a GSM8K solution, or None: the first admissible misreading in an order
    keyed by `parts` (deterministic) whose final answer is not in `avoid`."""
    return next((c for c in _misreads(solution, question, gold, parts) if c.wrong not in avoid), None)


def misread_chains(solution: str, question: str, gold: str) -> list[MisreadChain]:
    """Every admissible misread of a GSM8K solution (quantity in question order, then reading)."""
    return list(_misreads(solution, question, gold, None))


def _misreads(solution: str, question: str, gold: str, order: Optional[tuple]) -> Iterator[MisreadChain]:
    parsed = _parsed(solution, gold)
    if parsed is None:
        return
    lines, steps, g = parsed
    shown = [_FENCE.sub("", ln) for ln in lines]
    before = _false_equations("\n".join(shown))
    question_numbers = {_frac(n) for n in _NUMBER.findall(question)}
    chain_numbers = {_frac(n) for ln in shown for n in _NUMBER.findall(ln)}
    tries = [(v, text, read) for v, text in _given_quantities(question).items() for read in _misreadings(text)]
    if order is not None:
        tries = sorted(tries, key=lambda t: short_hash(*order, t[1], t[2]))
    for given, text, read in tries:
        got = _misread(lines, steps, given, read, question_numbers, chain_numbers, g)
        if got is None:
            continue
        out, wrong, first = got
        if _false_equations("\n".join(out)) > before:
            continue
        yield MisreadChain(out, _show(wrong), out[first], text, read)


def _scaled(a: Fraction, b: Fraction) -> bool:
    """b is a written as another power of ten (48 and 4.8 or 480): a derived form of the same number."""
    return b != a and any(b == a * Fraction(10) ** k for k in (-3, -2, -1, 1, 2, 3))


def _restate(text: str, changed: dict[Fraction, Fraction]) -> str:
    """`text` with every number in `changed` replaced by its new value, written as the old one was:
    the same decimal places ($13.20 -> $19.20, not $19.2) and thousands separators."""
    def new(m: re.Match) -> str:
        old = m.group(0).rstrip(",")
        v = _frac(old)
        if v not in changed:
            return m.group(0)
        v = changed[v]
        places = len(old.split(".")[1]) if "." in old else 0
        if (v * 10 ** places).denominator != 1:
            return _show(v) + m.group(0)[len(old):]
        body = f"{float(v):,.{places}f}" if "," in old else f"{float(v):.{places}f}"
        if old.startswith(".") and body.startswith("0."):
            body = body[1:]  # .85 -> .75, as written
        return body + m.group(0)[len(old):]
    return _NUMBER.sub(new, text)


def _prose_numbers(lines: list[str], steps: list[_Step]) -> set[Fraction]:
    """The numbers a chain writes outside its steps (visible expression, fence and shown result)."""
    out = set()
    for li, ln in enumerate(lines):
        pos = 0
        for s in (s for s in steps if s.line == li):
            out |= {_frac(n) for n in _NUMBER.findall(_FENCE.sub("", ln[pos:s.start]))}
            pos = s.end
        out |= {_frac(n) for n in _NUMBER.findall(_FENCE.sub("", ln[pos:]))}
    return out


def _misread(lines: list[str], steps: list[_Step], given: Fraction, read_text: str, question_numbers: set[Fraction],
             chain_numbers: set[Fraction], gold: Fraction) -> Optional[tuple[list[str], Fraction, int]]:
    read = _frac(read_text)
    if read in question_numbers or read in chain_numbers or read <= 0 or given not in chain_numbers:
        return None
    if given.denominator == 1 and read.denominator != 1:
        return None
    values = {s.value for s in steps}
    if given in values or any(_scaled(given, n) for n in chain_numbers - question_numbers - values - IMPLIED):
        return None  # the chain also computes the given number, or writes it in another form (48 -> 4.8)
    in_prose = _prose_numbers(lines, steps)
    changed: dict[Fraction, Fraction] = {given: read}
    new_expr: dict[int, tuple[str, Fraction]] = {}
    for si, s in enumerate(steps):
        if not {_frac(n) for n in _NUMBER.findall(s.expr)} & set(changed):
            if s.value in changed:
                return None  # an unchanged step with the value of a changed one: prose would be ambiguous
            continue
        e = _rewrite_numbers(s.expr, changed)
        v = _evaluate(e)
        if not _nice(v) or (s.value.denominator == 1 and v.denominator != 1):
            return None
        if v != s.value:
            if s.value in question_numbers or s.value in changed or (s.value in IMPLIED and s.value in in_prose):
                return None  # rewriting it in prose could touch a given quantity, another result or "7 days"
            changed[s.value] = v
        new_expr[si] = (e, v)
    if gold not in changed or len(set(changed.values())) < len(changed):
        return None
    if _in_words(set(changed), "\n".join(lines)):
        return None  # the chain writes a number it changes in words too
    # Prose: the given number is misread everywhere; a result is rewritten only once it is computed.
    known: dict[Fraction, Fraction] = {given: read}
    out = []
    first = None
    for li, ln in enumerate(lines):
        pieces, pos = [], 0
        for si in (j for j, s in enumerate(steps) if s.line == li):
            s = steps[si]
            pieces.append(_restate(ln[pos:s.start], known))
            if si in new_expr:
                e, v = new_expr[si]
                # A visible form mirrors the fence's operands; a step without one shows them in the
                # prose (rewritten above). Its result follows the fence.
                eq = ln[s.start + len(s.visible or ""):s.end]
                fence = _FENCE.search(eq)
                pieces.append(_restate(s.visible or "", known) + _restate(eq[:fence.start()], known)
                              + f"<<{e}={_show(v)}>>" + _restate(eq[fence.end():], {s.value: v}))
                if v != s.value:
                    known[s.value] = v
            else:
                pieces.append(ln[s.start:s.end])
            pos = s.end
        pieces.append(_restate(ln[pos:], known))
        new = "".join(pieces)
        if first is None and new != ln:
            first = li
        out.append(_FENCE.sub("", new))
    if any(_frac(n) in changed for ln in out for n in _NUMBER.findall(ln)):
        return None  # the given number or an old result survives somewhere: the chain would contradict itself
    return out, changed[gold], first
