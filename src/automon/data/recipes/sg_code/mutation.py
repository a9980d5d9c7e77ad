"""Wrong implementations: the canonical solution with one seeded mutation (a flipped comparison,
`+` <-> `-`, an off-by-one constant, ...), screened in the sandbox so that the chosen mutant
really fails a hidden test. The gaming twins of the construct pairs (families.py) build on them."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import automon.data.recipes.sg_code.pools as P
from automon.data.recipes.common import rotate
from automon.data.recipes.sg_code.syntax import parse
from automon.data.recipes.sg_code.tasks import Task
from automon.data.recipes.sg_code.verifier import Verifier

# Operator swaps located between two operands: AST node type -> (token, replacement).
_CMP_SWAP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
             ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"),
             ast.NotIn: ("not in", "in")}
_BIN_SWAP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "+"), ast.Div: ("/", "*"),
             ast.FloorDiv: ("//", "%"), ast.Mod: ("%", "//"), ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&")}
_BOOL_SWAP = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_AUG_SWAP = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+=")}
# Called names / methods swapped for their twin.
_NAME_SWAP = {"min": "max", "max": "min", "any": "all", "all": "any"}
_ATTR_SWAP = {"lower": "upper", "upper": "lower", "startswith": "endswith", "endswith": "startswith",
              "nlargest": "nsmallest", "nsmallest": "nlargest", "isupper": "islower", "islower": "isupper"}
_TOKEN = re.compile(rb"[-+*/%@&|^<>=!]+|\b(?:not\s+in|is\s+not|in|is|and|or)\b")
_MUTANT_TRIES = 5  # candidate mutations screened per task (see screen_mutants)


@dataclass(frozen=True)
class Mutation:
    start: int            # byte offsets into the UTF-8 source
    end: int
    new: bytes
    description: str      # "line 7: `<` -> `<=`"


def mutation_sites(code: str, mutable_from: int = 0, decrements: bool = False) -> list[Mutation]:
    """Single-token mutations of `code` (flipped comparisons, negated conditions, swapped boolean
    and arithmetic operators, off-by-one constants and lengths, min <-> max, lower <-> upper,
    reversed sort, join separator, ...),
    at byte offsets >= mutable_from and outside `while` loops (a flipped loop condition or
    counter tends to loop forever, which costs a full sandbox timeout). Sorted by position.
    `decrements` (the construct pairs' mutants) adds the off-by-one in the other direction, `n` -> `n - 1`
    for constants >= 1, so that a constant is as often lowered as raised (see balanced_pairs)."""
    raw, NL = code.encode("utf-8"), b"\n"
    starts, pos = [], 0
    for line in raw.split(NL):
        starts.append(pos)
        pos += len(line) + 1

    def start(node: ast.AST) -> int:
        return starts[node.lineno - 1] + node.col_offset

    def end(node: ast.AST) -> int:
        return starts[node.end_lineno - 1] + node.end_col_offset

    def between(left: ast.AST, right: ast.AST, token: str, new: str) -> tuple[int, int, str, str] | None:
        """The operator token between two operands, when it is exactly `token`."""
        toks = list(_TOKEN.finditer(raw, end(left), start(right)))
        if len(toks) != 1 or toks[0].group().split() != token.encode().split():
            return None
        return toks[0].start(), toks[0].end(), new, f"`{token}` -> `{new}`"

    tree = parse(code)
    in_while = {id(n) for w in ast.walk(tree) if isinstance(w, ast.While) for n in ast.walk(w)}
    found: list[tuple[int, int, str, str] | None] = []  # (start, end, replacement, what changed)
    for node in ast.walk(tree):
        if id(node) in in_while:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMP_SWAP:
                    found.append(between(node.left if i == 0 else node.comparators[i - 1], node.comparators[i],
                                         *_CMP_SWAP[type(op)]))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
            found.append(between(node.left, node.right, *_BIN_SWAP[type(node.op)]))
        elif isinstance(node, ast.BoolOp):
            for left, right in zip(node.values, node.values[1:]):
                found.append(between(left, right, *_BOOL_SWAP[type(node.op)]))
        elif isinstance(node, ast.AugAssign) and type(node.op) in _AUG_SWAP:
            found.append(between(node.target, node.value, *_AUG_SWAP[type(node.op)]))
        elif isinstance(node, (ast.If, ast.IfExp)):
            found.append((start(node.test), start(node.test), "not ", "`if x` -> `if not x`"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            m = re.match(rb"not\b\s*", raw[start(node):start(node.operand)])
            found.append((start(node), start(node) + m.end(), "", "`not x` -> `x`") if m else None)
        elif isinstance(node, ast.Constant):
            text = raw[start(node):end(node)].decode("utf-8")
            if isinstance(node.value, bool):
                found.append((start(node), end(node), str(not node.value), f"`{text}` -> `{not node.value}`"))
            elif type(node.value) is int and text == str(node.value):
                found.append((start(node), end(node), str(node.value + 1), f"`{text}` -> `{node.value + 1}`"))
                if decrements and node.value >= 1:
                    found.append((start(node), end(node), str(node.value - 1), f"`{text}` -> `{node.value - 1}`"))
        elif isinstance(node, ast.Call):
            f = node.func
            closes = raw[end(node) - 1:end(node)] == b")"
            if isinstance(f, ast.Name) and f.id in _NAME_SWAP:
                found.append((start(f), end(f), _NAME_SWAP[f.id], f"`{f.id}` -> `{_NAME_SWAP[f.id]}`"))
            elif isinstance(f, ast.Attribute) and f.attr in _ATTR_SWAP and raw[:end(f)].endswith(f.attr.encode()):
                found.append((end(f) - len(f.attr), end(f), _ATTR_SWAP[f.attr],
                              f"`{f.attr}` -> `{_ATTR_SWAP[f.attr]}`"))
            elif isinstance(f, ast.Name) and f.id == "len" and closes:
                found.append((end(node), end(node), " - 1", "`len(...)` -> `len(...) - 1`"))
            elif (isinstance(f, ast.Attribute) and f.attr == "join" and isinstance(f.value, ast.Constant)
                  and f.value.value in ("", " ")):
                old, sep = raw[start(f.value):end(f.value)].decode(), repr(" " if f.value.value == "" else "")
                found.append((start(f.value), end(f.value), sep, f"`{old}.join` -> `{sep}.join`"))
            elif (isinstance(f, ast.Name) and f.id == "sorted" and node.args and closes
                  and not any(k.arg == "reverse" for k in node.keywords)):
                found.append((end(node) - 1, end(node) - 1, ", reverse=True",
                              "`sorted(...)` -> `sorted(..., reverse=True)`"))
    sites = {Mutation(lo, hi, new.encode(), f"line {raw.count(NL, 0, lo) + 1}: {change}")
             for lo, hi, new, change in filter(None, found) if lo >= mutable_from}
    return sorted(sites, key=lambda m: (m.start, m.end, m.new))


def apply_mutation(code: str, m: Mutation) -> str | None:
    """The mutated source, or None when the change does not parse (operator precedence)."""
    raw = code.encode("utf-8")
    out = (raw[:m.start] + m.new + raw[m.end:]).decode("utf-8")
    try:
        parse(out)
    except SyntaxError:
        return None
    return out


def screen_mutants(tasks: list[Task], seed: int, verifier: Verifier) -> dict[str, tuple[str, str]]:
    """key -> (wrong implementation, mutation description) for the tasks that have one.

    Up to _MUTANT_TRIES mutations per task, in a seeded order, each probed against the hidden
    tests with the visible inputs special-cased (`_special_cased`, when the signature allows
    it). The first probe that fails with an
    AssertionError wins (a wrong answer on an input that is not visible: not a crash, not a hang),
    else the first that fails at all. Equivalent mutants, mutants wrong only on the visible inputs
    and hanging ones are skipped, so the gaming samples built on them rarely need dropping.
    """
    queues = {}
    for t in tasks:
        sites = mutation_sites(t.code, t.mutable_from, decrements=True)
        queues[t.key] = rotate(sites, len(sites), seed, t.key, "mutation") if sites else []
    chosen: dict[str, tuple[str, str]] = {}
    fallback: dict[str, tuple[str, str]] = {}
    pending = list(tasks)
    for _ in range(_MUTANT_TRIES):
        probes = []
        for t in pending:
            while queues[t.key]:
                m = queues[t.key].pop(0)
                code = apply_mutation(t.code, m)
                if code is not None:
                    handle = verifier.hidden(_special_cased(t, code) or code, t.hidden)
                    probes.append((t, code, m.description, handle))
                    break
        verifier.run()
        pending = []
        for t, code, desc, handle in probes:
            passed, why = verifier[handle]
            if why.endswith(": AssertionError"):
                chosen[t.key] = (code, desc)
                continue
            if not passed and why.startswith("exit"):
                fallback.setdefault(t.key, (code, desc))
            pending.append(t)
    return {**fallback, **chosen}


def _special_cased(task: Task, code: str) -> str | None:
    """`code` with `if <params> == <visible args>: return <expected>` in front of the entry's body,
    one branch per visible test (so that a probe fails only on inputs that are not visible); None when
    the entry takes no parameters."""
    if not task.params:
        return None
    ind = task.indent
    branches = [f"{ind}if {P.key_expr(task)} == {P.args_expr(v)}:\n{ind}{P.step(ind)}return {v.expected}"
                for v in task.visible]
    return P.insert_body(task, code, branches)


# The two sides of a mutation that reads as its own reverse: `if x` -> `if not x` undoes `not x` -> `x`.
_SIDES = {"if x": "x", "if not x": "not x"}


def swap(description: str) -> tuple[str, str]:
    """What a mutation changed, as (old, new) text: "line 7: `<` -> `<=`" -> ("<", "<=")."""
    old, new = re.search(r"`(.*)` -> `(.*)`$", description).groups()
    return _SIDES.get(old, old), _SIDES.get(new, new)


def balanced_pairs(swaps: dict[str, tuple[str, str]], seed: int) -> set[str]:
    """The keys whose mutation may stand in a test pair, so that every change is made as often in
    one direction as in the other (as many `<` -> `<=` as `<=` -> `<`, `1` -> `2` as `2` -> `1`):
    a gaming twin carries its task's mutation, so a direction made more often would tell a
    classifier which twin is the gaming one. Per direction, a seeded choice of min(n, n reverse)."""
    by_swap: dict[tuple[str, str], list[str]] = {}
    for key, pair in swaps.items():
        by_swap.setdefault(pair, []).append(key)
    keep: set[str] = set()
    for (old, new), keys in by_swap.items():
        n = min(len(keys), len(by_swap.get((new, old), [])))
        keep.update(rotate(sorted(keys), len(keys), seed, old, new, "balanced")[:n])
    return keep
