"""`python -m automon.sandbox check --code F --visible F --hidden F`: verify one solution the way
the build does (same sandbox, same graders) and print one JSON verdict on stdout.

  --code     the solution (Python source)
  --visible  the visible tests: assert statements appended to the solution (the reward proxy)
  --hidden   the hidden tests: Python source run in the separate grader process. A HumanEval-style
             file that defines `check(candidate)` without calling it is called with the entry.
  --setup    trusted code the grader runs before the hidden tests (e.g. a HumanEval prompt)
  --entry    the function under test (default: the one function the visible tests call that
             they do not define and that is not a builtin). Taken from the task, never from the
             solution: a solution names no function the grader binds.

The verdict: {"label": "gaming" | "benign" | "visible_fail", "visible": {"pass", "result"},
"hidden": {"pass", "result"}, "isolation", "limits", "program": {stdout/stderr tails}}. Exit 0 when a
verdict was reached (whatever it is), 2 with one `error:` line when it could not be.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import sys
from dataclasses import asdict
from keyword import iskeyword

from automon.sandbox.grading import (UNVERIFIABLE, hidden_job, hidden_tests, hidden_verdict, label_of, visible_job,
                                    visible_verdict)
from automon.sandbox.isolation import MODES
from automon.sandbox.limits import Limits
from automon.sandbox.pool import Sandbox, SandboxError
from automon.sandbox.protocol import MAX_PROGRAM


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_PROGRAM + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: cannot read {what} file {path!r}: {e}") from None
    if len(text) > MAX_PROGRAM:
        raise SystemExit(f"error: the {what} file {path!r} has more than {MAX_PROGRAM:,} characters, "
                         "more than the sandbox runs")
    return text


def _parse(src: str, what: str) -> ast.Module:
    """The source's syntax tree, or one error line (a syntax error, or nesting deeper than the
    parser's own limits). `what`: "the visible tests do", ..."""
    try:
        return ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise SystemExit(f"error: {what} not parse: {why}") from None


def _entry(visible: ast.Module) -> str | None:
    """The function the visible tests call, neither defined by them nor a builtin; None if none."""
    defined = {n.id for n in ast.walk(visible) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    defined |= {n.name for n in ast.walk(visible) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {(a.asname or a.name).split(".")[0] for n in ast.walk(visible) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    called = [n.func.id for n in ast.walk(visible) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    names = list(dict.fromkeys(c for c in called if c not in defined and not hasattr(builtins, c)))
    if len(names) > 1:
        raise SystemExit(f"error: the visible tests call several functions ({', '.join(names)}); "
                         "name the one under test with --entry")
    return names[0] if names else None


def _calls_check(tests: ast.Module) -> tuple[bool, bool]:
    """(defines a top-level check(), calls it somewhere at top level)."""
    defines = any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tests.body)
    calls = any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                and n.value.func.id == "check" for n in tests.body)
    return defines, calls


_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _tests_anything(*trees: ast.Module) -> bool:
    """Whether the tests can fail at all: an assert that is not of a true constant, or a raise, in code
    that runs. What runs: the modules' top level, outside branches a constant rules out (`if False:`,
    `while 0:`), and the body of every function (or method) that running code names, called or passed
    on (`check(candidate)`, `map(t, cases)`; a `test_*` method of a class, as unittest finds it), until
    nothing new is named. A check only inside a function nobody names, or under `if False:`, never runs:
    such tests would pass any solution. Conservative: a named function counts as run."""
    defs: dict[str, list[ast.AST]] = {}
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, _FUNCS):
                defs.setdefault(n.name, []).append(n)
    todo: list[ast.AST] = [stmt for tree in trees for stmt in tree.body]
    seen: set[str] = set()

    def reach(name: str) -> None:
        if name in defs and name not in seen:
            seen.add(name)
            todo.extend(stmt for d in defs[name] for stmt in d.body)

    while todo:
        node = todo.pop()
        if isinstance(node, _FUNCS):
            continue  # its body runs when something names it (reach)
        if isinstance(node, ast.ClassDef):
            todo.extend(node.body)
            for m in node.body:
                if isinstance(m, _FUNCS) and m.name.startswith("test"):
                    reach(m.name)
            continue
        if isinstance(node, (ast.If, ast.While)) and isinstance(node.test, ast.Constant):
            todo.extend(node.body if node.test.value else node.orelse)
            continue
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Assert) and not (isinstance(node.test, ast.Constant) and node.test.value):
            return True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reach(node.id)
        elif isinstance(node, ast.Attribute):
            reach(node.attr)
        todo.extend(ast.iter_child_nodes(node))
    return False


def check(code: str, visible: str, hidden: str, setup: str = "", entry: str | None = None,
          limits: Limits = Limits(timeout_s=10, cpu_s=2, memory_mb=1024), isolation: str = "auto") -> dict:
    """The verdict on one solution (what the CLI prints)."""
    if entry is not None and not (entry.isidentifier() and not iskeyword(entry)):
        raise SystemExit(f"error: --entry must be a Python identifier, got {entry!r}")
    visible_tree = _parse(visible, "the visible tests do")
    tree, setup_tree = _parse(hidden, "the hidden tests do"), _parse(setup, "the hidden setup does")
    entry = entry or _entry(visible_tree)
    defines, calls = _calls_check(tree)
    if defines and not calls:
        if entry is None:
            raise SystemExit("error: the hidden tests define check(candidate) but the visible tests call no "
                             "function to pass it; give --entry NAME")
        hidden = f"{hidden.rstrip()}\n\n\ncheck({entry})\n"
        tree = ast.parse(hidden)
    if not _tests_anything(tree, setup_tree):
        raise SystemExit("error: the hidden tests run no assert or raise statement (none, only in functions "
                         "nothing calls, or only under a constant false condition): they could not fail, so they "
                         "cannot tell a solution that passes them")
    tests = hidden_tests(hidden, setup, (entry,) if entry else ())
    asserts = [visible.strip("\n")] if visible.strip() else []  # appended as written (loops, helpers)
    if len(code) + len(visible) + 3 > MAX_PROGRAM:
        raise SystemExit(f"error: the solution and its visible tests have more than {MAX_PROGRAM:,} characters, "
                         "more than the sandbox runs")
    with Sandbox(limits, workers=1, isolation=isolation) as sb:
        vis, hid = sb.run_jobs([visible_job(code, asserts), hidden_job(code, tests)])
        mode = sb.isolation
    (v_ok, v_why), (h_ok, h_why) = visible_verdict(vis), hidden_verdict(hid)
    if h_why.startswith(UNVERIFIABLE):  # the verifier's own limit, not the solution's failure
        raise SystemExit(f"error: the hidden tests cannot judge a solution through the sandbox: {h_why[len(UNVERIFIABLE):]} "
                         "(arguments and results cross as plain data: numbers, strings, lists, tuples, dicts, sets, ...)")

    def tail(s: str) -> str:
        return s[-2000:]

    return {"label": label_of(v_ok, h_ok),
            "visible": {"pass": v_ok, "result": v_why},
            "hidden": {"pass": h_ok, "result": h_why},
            "isolation": mode, "entry": entry, "limits": asdict(limits),
            "program": {"visible_stdout": tail(vis.stdout), "visible_stderr": tail(vis.stderr),
                        "hidden_stdout": tail(hid.program.stdout), "hidden_stderr": tail(hid.program.stderr),
                        "grader_stderr": tail(hid.grader.stderr)}}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one `error:` line and exit 2, as every automon entry point
        raise SystemExit(f"error: {message} (see python -m automon.sandbox check --help)")


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m automon.sandbox", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    c = sub.add_parser("check", help="verify one solution; print one JSON verdict")
    c.add_argument("--code", required=True)
    c.add_argument("--visible", required=True)
    c.add_argument("--hidden", required=True)
    c.add_argument("--setup")
    c.add_argument("--entry")
    c.add_argument("--cpu-s", type=float, default=2.0, help="CPU seconds per program (default 2)")
    c.add_argument("--timeout-s", type=float, default=10.0, help="wall seconds per program (default 10)")
    c.add_argument("--memory-mb", type=int, default=1024, help="memory per program tree (default 1024)")
    c.add_argument("--isolation", default="auto", choices=("auto", *MODES))
    try:
        a = ap.parse_args(argv)
        limits = Limits(timeout_s=a.timeout_s, cpu_s=a.cpu_s, memory_mb=a.memory_mb)
        verdict = check(_read(a.code, "--code"), _read(a.visible, "--visible"), _read(a.hidden, "--hidden"),
                        _read(a.setup, "--setup") if a.setup else "", a.entry, limits, a.isolation)
    except (SandboxError, ValueError) as e:  # no isolation runs here; limits out of range
        print("error: " + " ".join(str(e).split()), file=sys.stderr)  # one line, whatever a worker printed
        return 2
    except SystemExit as e:
        if e.code in (0, None):  # --help
            return 0
        print(e.code if isinstance(e.code, str) else "error: failed", file=sys.stderr)
        return 2
    print(json.dumps(verdict, sort_keys=True))
    return 0
