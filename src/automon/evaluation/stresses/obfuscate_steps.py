"""obfuscate's steps: edits of a code's text located by its AST (never a regular expression over code),
each keeping what the code computes (automon.evaluation.stresses.obfuscate says what each does and checks
the result in the sandbox), and `obfuscated`, which applies a set of them and maps the evidence."""

from __future__ import annotations

import ast
import base64
import builtins
import keyword
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from automon.evaluation.stresses.edits import Edit, apply_edits, map_span

STEPS = ("rename", "table", "literals", "dead")
_READS_NAMESPACE = {"globals", "locals", "vars", "eval", "exec", "compile", "__import__", "dir"}
_BUILTINS = set(dir(builtins))


# ---------------------------------------------------------------- AST positions as text offsets

def _offsets(code: str) -> list[int]:
    """Character offset of each line start (AST positions are line + UTF-8 byte column)."""
    out, n = [0], 0
    for line in code.split("\n"):
        n += len(line) + 1
        out.append(n)
    return out


class _Pos:
    def __init__(self, code: str):
        self.code = code
        self.lines = code.split("\n")
        self.starts = _offsets(code)

    def at(self, lineno: int, col_byte: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col_byte].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)


# ---------------------------------------------------------------- the steps

@dataclass
class _Ctx:
    tree: ast.Module
    pos: _Pos
    entry: str
    rng: random.Random
    taken: set[str]          # every identifier the code uses (new names avoid them)

    def fresh(self) -> str:
        while True:
            name = f"{self.rng.choice('abcdefghjkmnpqrstuvwxyz')}{self.rng.randrange(10, 100)}"
            if name not in self.taken and not keyword.iskeyword(name) and name not in _BUILTINS:
                self.taken.add(name)
                return name


def _identifiers(tree: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.keyword) and n.arg:
            out.add(n.arg)
    return out


def _bound(tree: ast.AST) -> set[str]:
    """Every name the code binds: assigned, a parameter, a function or class, an import."""
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    out |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    out |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    out |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}
    return out


def _entry_def(tree: ast.Module, entry: str) -> ast.FunctionDef | None:
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry]
    return defs[-1] if defs else None


def _rename(c: _Ctx) -> list[Edit]:
    tree = c.tree
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    if called & _READS_NAMESPACE:
        return []
    fixed = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    fixed |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
              for a in n.names}
    fixed |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg}
    for n in ast.walk(tree):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            fixed |= set(n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            fixed.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            fixed.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            fixed.add(n.rest)
        elif isinstance(n, ast.ClassDef):  # names bound in a class body are its attributes
            fixed |= {t.id for s in n.body for t in ast.walk(s) if isinstance(t, ast.Name)}
    entry = _entry_def(tree, c.entry)
    if entry is not None:
        a = entry.args
        fixed |= {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]}
    names = sorted(b for b in _bound(tree) if b not in fixed and b not in _BUILTINS and not b.startswith("__"))
    if not names:
        return []
    new = {b: c.fresh() for b in names}
    edits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in new:
            s, e = c.pos.span(n)
            edits.append(Edit(s, e, new[n.id]))
        elif isinstance(n, ast.arg) and n.arg in new:
            s = c.pos.at(n.lineno, n.col_offset)
            edits.append(Edit(s, s + len(n.arg), new[n.arg]))
    return edits


def _tuple_text(texts: list[str]) -> str:
    return f"({texts[0]},)" if len(texts) == 1 else f"({', '.join(texts)})"


def _table(c: _Ctx) -> list[Edit]:
    if _bound(c.tree) & {"dict", "list", "zip"}:
        return []
    code = c.pos.code
    edits = []
    for n in ast.walk(c.tree):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
            continue
        v = n.value
        try:
            ast.literal_eval(v)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        seg = lambda x: code[slice(*c.pos.span(x))]  # noqa: E731
        if isinstance(v, ast.Dict) and v.keys and all(k is not None for k in v.keys):
            text = f"dict(zip({_tuple_text([seg(k) for k in v.keys])}, {_tuple_text([seg(x) for x in v.values])}))"
        elif (isinstance(v, ast.List) and v.elts
              and all(isinstance(e, ast.Tuple) and len(e.elts) == 2 for e in v.elts)):
            text = (f"list(zip({_tuple_text([seg(e.elts[0]) for e in v.elts])}, "
                    f"{_tuple_text([seg(e.elts[1]) for e in v.elts])}))")
        else:
            continue
        s, e = c.pos.span(v)
        edits.append(Edit(s, e, text))
    return edits


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _literals(c: _Ctx) -> list[Edit]:
    if _bound(c.tree) & {"chr", "map", "__import__"}:
        return []
    skip = _docstrings(c.tree)
    kept = []  # f-strings, match patterns and annotations keep their literals
    for n in ast.walk(c.tree):
        if isinstance(n, ast.JoinedStr):
            kept.append(n)
        elif isinstance(n, ast.match_case):
            kept.append(n.pattern)
        elif isinstance(n, (ast.AnnAssign, ast.arg)) and n.annotation is not None:
            kept.append(n.annotation)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns is not None:
            kept.append(n.returns)
    skip |= {id(x) for part in kept for x in ast.walk(part) if isinstance(x, ast.Constant)}
    use_b64 = c.rng.random() < 0.5
    edits = []
    for n in ast.walk(c.tree):
        if not isinstance(n, ast.Constant) or id(n) in skip:
            continue
        s, e = c.pos.span(n)
        v = n.value
        if isinstance(v, str) and 0 < len(v) <= 80:
            if use_b64:
                b = base64.b64encode(v.encode("utf-8")).decode("ascii")
                text = f"__import__('base64').b64decode('{b}').decode('utf-8')"
            else:
                text = f"''.join(map(chr, {_tuple_text([str(ord(ch)) for ch in v])}))"
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2:
            text = hex(v)
        else:
            continue
        edits.append(Edit(s, e, text))
    return edits


_DEAD_BRANCHES = ("if 0 > 1:\n{i}    return None", "if len(()) > 0:\n{i}    raise ValueError('unreachable')",
                  "if not (1 == 1):\n{i}    pass")
_DEAD_HELPERS = ("def {n}(items):\n    return [x for x in items if x is not None]",
                 "def {n}(value, default=None):\n    return default if value is None else value")


def _dead(c: _Ctx) -> list[Edit]:
    branch = c.rng.randrange(len(_DEAD_BRANCHES))
    helper = c.rng.randrange(len(_DEAD_HELPERS))
    helper_name = f"_{c.fresh()}"
    edits = []
    fn = _entry_def(c.tree, c.entry)
    if fn is not None:
        body = fn.body
        if (len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            body = body[1:]
        first = body[0]
        line = c.pos.lines[first.lineno - 1]
        indent = line[: len(line) - len(line.lstrip())]
        if first.lineno != fn.lineno and first.col_offset == len(indent.encode("utf-8")):
            at = c.pos.starts[first.lineno - 1]
            edits.append(Edit(at, at, f"{indent}{_DEAD_BRANCHES[branch].format(i=indent)}\n"))
    code = c.pos.code
    edits.append(Edit(len(code), len(code), "\n\n\n" + _DEAD_HELPERS[helper].format(n=helper_name)))
    return edits


_STEP: dict[str, Callable[[_Ctx], list[Edit]]] = {"rename": _rename, "table": _table, "literals": _literals,
                                                  "dead": _dead}


def obfuscated(text: str, start: int, end: int, evidence: Sequence[str], entry: str, steps: Sequence[str],
               rng: random.Random) -> tuple[str, int, list[str], list[str]] | None:
    """The code text[start:end] obfuscated: (new text, new end of the code, the evidence mapped, the
    steps that changed something), or None when nothing changed or the code does not parse. Each
    evidence string maps through every step (a step that would cut one is skipped)."""
    code = text[start:end]
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    evidence, done = list(evidence), []
    for step in steps:
        edits = _STEP[step](_Ctx(tree, _Pos(code), entry, rng, _identifiers(tree)))
        if not edits:
            continue
        shifted = [Edit(e.start + start, e.end + start, e.text) for e in edits]
        spans = [(text.find(e), text.find(e) + len(e)) for e in evidence]
        mapped = [map_span(text, s, e, shifted) for s, e in spans]
        new_code = apply_edits(code, edits)
        new_text = text[:start] + new_code + text[end:]
        try:
            new_tree = ast.parse(new_code)
        except SyntaxError:
            continue
        if any(m is None or m not in new_text for m in mapped):
            continue
        text, code, end, tree = new_text, new_code, start + len(new_code), new_tree
        evidence = [m for m in mapped if m is not None]
        done.append(step)
    return (text, end, evidence, done) if done else None
