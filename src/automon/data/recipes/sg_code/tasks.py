"""HumanEval / MBPP rows parsed into `Task`s: the problem shown, the canonical solution, the
simple visible tests, the strict hidden test program and where a strategy may edit the code."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from automon.config.sg_code import SgCodeConfig
from automon.data.recipes.base import Drops
from automon.data.recipes.sg_code.syntax import parse
from automon.sandbox.grading import HiddenTests, hidden_tests

SUBSET = "sg_code"


@dataclass
class Visible:
    """One visible test: `assert <entry>(<args>) == <expected>` with literal args and result."""
    text: str
    args: list[str]       # source of each argument (single line)
    expected: str         # source of the expected value (single line)
    hashable: bool        # whether the argument tuple can key a dict


@dataclass
class Task:
    """A HumanEval / MBPP problem, parsed once for request, construct pairs and graders."""
    key: str
    source: str
    dataset: str
    ref: str
    problem: str          # the problem part of the request
    code: str             # canonical solution, LF line ends
    entry: str
    params: list[str]     # parameters bound to the visible arguments (hard-coded keys)
    visible: list[Visible]
    hidden: HiddenTests   # the strict grader's tests: setup, every test, the entry point
    n_hidden: int         # number of hidden test asserts (for the record)
    body_line: int        # 0-based line of the entry function's first statement after its docstring
    indent: str           # that line's indentation
    mutable_from: int     # byte offset from which mutations may apply (HumanEval: after the prompt)


def as_list(value: Any) -> list:
    """A list field that may arrive as a list or as its JSON / Python-literal text."""
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return []
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = ast.literal_eval(value)
        if isinstance(parsed, list):
            return parsed
    raise ValueError(f"expected a list, got {type(value).__name__}: {str(value)[:80]!r}")


def _src(node: ast.AST, text: str) -> str:
    seg = ast.get_source_segment(text, node)
    return seg if seg is not None and "\n" not in seg else ast.unparse(node)


def _literal(node: ast.AST) -> Any:
    return ast.literal_eval(node)  # raises ValueError / TypeError etc. for non-literals


def parse_visible(stmt: ast.stmt, text: str, call_name: str, entry: str) -> Visible | None:
    """A simple visible test from one assert statement, or None.

    Accepted: `assert f(lits) == lit`, `assert f(lits) is True/False`, `assert f(lits)` and
    `assert not f(lits)` (the last three shown as `== True` / `== False`). `call_name` is how the
    test names the function (HumanEval: candidate), `entry` how the solution does.
    """
    if not isinstance(stmt, ast.Assert):
        return None
    t = stmt.test
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.Eq, ast.Is)):
        call, exp_node = t.left, t.comparators[0]
        is_bool = isinstance(exp_node, ast.Constant) and isinstance(exp_node.value, bool)
        if isinstance(t.ops[0], ast.Is) and not is_bool:
            return None
    elif isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
        call, exp_node = t.operand, ast.Constant(False)
    else:
        call, exp_node = t, ast.Constant(True)
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == call_name
            and not call.keywords and not any(isinstance(a, ast.Starred) for a in call.args)):
        return None
    try:
        values = tuple(_literal(a) for a in call.args)
        _literal(exp_node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    try:
        hash(values)
        hashable = True
    except TypeError:
        hashable = False
    args = [_src(a, text) for a in call.args]
    expected = _src(exp_node, text)
    return Visible(f"assert {entry}({', '.join(args)}) == {expected}", args, expected, hashable)


def _entry_def(tree: ast.Module, entry: str) -> ast.FunctionDef | None:
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry]
    return defs[-1] if defs else None


def _bind_params(fn: ast.FunctionDef, visible: list[Visible]) -> list[str] | None:
    """The parameter names the visible arguments bind to, or None when that is not plain
    positional binding (varargs, keyword-only without default, calls of different arity)."""
    a = fn.args
    if a.vararg or a.kwarg or any(d is None for d in a.kw_defaults):
        return None
    params = [p.arg for p in a.posonlyargs + a.args]
    arity = {len(v.args) for v in visible}
    if len(arity) != 1:
        return None
    n = arity.pop()
    if n > len(params) or len(params) - n > len(a.defaults):
        return None
    return params[:n]


def _body_start(fn: ast.FunctionDef, lines: list[str]) -> tuple[int, str] | None:
    """(0-based line, indentation) of the first statement after the docstring, if on its own line."""
    body = fn.body
    if (len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    first = body[0]
    # Not `def f(x): return x`, and not a decorated nested def (its lineno is the `def` line, below
    # the decorators): inserting lines there would break the code.
    if first.lineno == fn.lineno or getattr(first, "decorator_list", None):
        return None
    line = lines[first.lineno - 1]
    indent = line[: len(line) - len(line.lstrip())]
    if first.col_offset != len(indent.encode("utf-8")):  # not the first statement on its line
        return None
    return first.lineno - 1, indent


def _task(*, key: str, source: str, dataset: str, ref: str, problem: str, code: str, entry: str,
          visible_stmts: list[tuple[ast.stmt, str]], call_name: str, test_src: str, setup: str, n_hidden: int,
          mutable_from: int, cfg: SgCodeConfig, drops: Drops) -> Task | None:
    try:
        tree = parse(code)
    except SyntaxError:
        drops.add(SUBSET, "canonical_syntax_error")
        return None
    fn = _entry_def(tree, entry)
    if fn is None:
        drops.add(SUBSET, "entry_point_not_found")
        return None
    visible = [v for v in (parse_visible(s, text, call_name, entry) for s, text in visible_stmts) if v]
    visible = visible[: cfg.visible_tests]
    if not visible:
        drops.add(SUBSET, "no_simple_visible_tests")
        return None
    lines = code.split("\n")
    start = _body_start(fn, lines)
    if start is None:
        drops.add(SUBSET, "entry_body_not_on_own_line")
        return None
    try:
        strict = hidden_tests(test_src, setup, (entry,))
    except SyntaxError:
        drops.add(SUBSET, "tests_syntax_error")
        return None
    return Task(key, source, dataset, ref, problem, code, entry, _bind_params(fn, visible) or [], visible,
                strict, n_hidden, start[0], start[1], mutable_from)


def humaneval_task(row: dict, cfg: SgCodeConfig, drops: Drops) -> Task | None:
    prompt, entry = row["prompt"].replace("\r\n", "\n"), row["entry_point"]
    code = prompt + row["canonical_solution"].replace("\r\n", "\n")
    test = row["test"].replace("\r\n", "\n")
    try:
        check = next(n for n in parse(test).body if isinstance(n, ast.FunctionDef) and n.name == "check")
    except (SyntaxError, StopIteration):
        drops.add(SUBSET, "humaneval_no_check_function")
        return None
    n_hidden = sum(isinstance(n, ast.Assert) for n in ast.walk(check))
    problem = f"Complete this Python function:\n\n```python\n{prompt.rstrip()}\n```"
    return _task(key=f"humaneval:{row['task_id']}", source=f"humaneval:task_id={row['task_id']}",
                 dataset="humaneval", ref=row.get("_ref", ""), problem=problem, code=code, entry=entry,
                 visible_stmts=[(s, test) for s in check.body], call_name="candidate",
                 test_src=f"{test}\n\ncheck({entry})\n", setup=prompt, n_hidden=n_hidden,
                 mutable_from=len(prompt.encode("utf-8")), cfg=cfg, drops=drops)


def _mbpp_entry(code: str, tests: list[str]) -> str | None:
    """The top-level function of `code` that the first test calls."""
    try:
        defs = {n.name for n in parse(code).body if isinstance(n, ast.FunctionDef)}
        calls = [n.func.id for n in ast.walk(parse(tests[0]))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    except (SyntaxError, IndexError):
        return None
    return next((c for c in calls if c in defs), None)


def _signature(code: str, entry: str) -> str:
    fn = _entry_def(parse(code), entry)
    return f"def {entry}({ast.unparse(fn.args)}):"


def mbpp_task(row: dict, cfg: SgCodeConfig, drops: Drops) -> Task | None:
    code = row["code"].replace("\r\n", "\n")
    tests = [t.replace("\r\n", "\n").strip() for t in as_list(row["test_list"])]
    challenge = [t.replace("\r\n", "\n").strip() for t in as_list(row.get("challenge_test_list") or [])]
    entry = _mbpp_entry(code, tests)
    if entry is None:
        drops.add(SUBSET, "entry_point_not_found")
        return None
    stmts = []
    for t in tests:
        try:
            stmts += [(s, t) for s in parse(t).body]
        except SyntaxError:
            continue
    setup = (row.get("test_setup_code") or "").replace("\r\n", "\n").strip()
    test_src = "\n".join(tests + challenge) + "\n"
    problem = f"{row['text'].strip()}\n\nFunction signature: `{_signature(code, entry)}`"
    return _task(key=f"mbpp:{row['task_id']}", source=f"mbpp:task_id={row['task_id']}", dataset="mbpp",
                 ref=row.get("_ref", ""), problem=problem, code=code, entry=entry, visible_stmts=stmts,
                 call_name=entry, test_src=test_src, setup=setup, n_hidden=len(tests) + len(challenge), mutable_from=0,
                 cfg=cfg, drops=drops)

