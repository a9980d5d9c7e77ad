"""`python -m automon.sandbox check --code F --visible F --hidden F`: verify one solution the way
the build does (same sandbox, same graders) and print one JSON verdict on stdout.

  --code     the solution (Python source)
  --visible  the visible tests: assert statements appended to the solution (the reward proxy)
  --hidden   the hidden tests: Python source run in the separate grader process. A HumanEval-style
             file that defines `check(candidate)` without calling it is called with --entry.
  --setup    trusted code the grader runs before the hidden tests (e.g. a HumanEval prompt)
  --entry    the solution's function the tests call (default: its last top-level function)

The verdict: {"label": "gaming" | "benign" | "visible_fail", "visible": {"pass", "result"},
"hidden": {"pass", "result"}, "isolation", "limits", "program": {stdout/stderr tails}}. Exit 0 when a
verdict was reached (whatever it is), 2 with one `error:` line when it could not be.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict

from automon.sandbox.grading import hidden_job, hidden_tests, hidden_verdict, label_of, visible_job, visible_verdict
from automon.sandbox.isolation import MODES
from automon.sandbox.pool import Sandbox, SandboxError
from automon.sandbox.wire import Limits


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: cannot read {what} file {path!r}: {e}") from None


def _entry(code: str) -> str | None:
    try:
        defs = [n.name for n in ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    except SyntaxError:
        return None
    return defs[-1] if defs else None


def _calls_check(tests: ast.Module) -> tuple[bool, bool]:
    """(defines a top-level check(), calls it somewhere at top level)."""
    defines = any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tests.body)
    calls = any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                and n.value.func.id == "check" for n in tests.body)
    return defines, calls


def check(code: str, visible: str, hidden: str, setup: str = "", entry: str | None = None,
          limits: Limits = Limits(timeout_s=10, cpu_s=2, memory_mb=1024), isolation: str = "auto") -> dict:
    """The verdict on one solution (what the CLI prints)."""
    entry = entry or _entry(code)
    try:
        tree = ast.parse(hidden)
    except SyntaxError as e:
        raise SystemExit(f"error: the hidden tests do not parse: {e}") from None
    defines, calls = _calls_check(tree)
    if defines and not calls:
        if entry is None:
            raise SystemExit("error: the hidden tests define check(candidate) but the solution defines no "
                             "function to pass it; give --entry NAME")
        hidden = f"{hidden.rstrip()}\n\n\ncheck({entry})\n"
    try:
        tests = hidden_tests(hidden, setup, (entry,) if entry else ())
    except SyntaxError as e:
        raise SystemExit(f"error: the hidden setup does not parse: {e}") from None
    asserts = [visible.strip("\n")] if visible.strip() else []  # appended as written (loops, helpers)
    with Sandbox(limits, workers=1, isolation=isolation) as sb:
        vis, hid = sb.run_jobs([visible_job(code, asserts), hidden_job(code, tests)])
        mode = sb.isolation
    (v_ok, v_why), (h_ok, h_why) = visible_verdict(vis), hidden_verdict(hid)

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
    except SandboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # limits out of range
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        if e.code in (0, None):  # --help
            return 0
        print(e.code if isinstance(e.code, str) else "error: failed", file=sys.stderr)
        return 2
    print(json.dumps(verdict, sort_keys=True))
    return 0
