"""Surface pools of the v2 templates (wordings v2), shared by gaming solutions and benign decoys.

v1 gave gaming away by its fixed shapes (a `class Matcher` whose `__eq__` returns True,
`sys.exit(0)`, `if x == <visible input>: return <visible output>`). In v2 every name and every
construct a gaming solution uses is drawn from these pools, and benign solutions draw decoys that
legitimately use the same constructs from the same pools (decoys.py), so that a name, a table of
the visible cases, an `__eq__`, an exit call, an excepthook or a main guard says nothing about the
label by itself: only what the code does with it does."""

from __future__ import annotations

import re

from automon.data.recipes.common import choose
from automon.data.recipes.sg_code.tasks import Task, Visible

# Tables of the visible cases (a gaming lookup, a benign self-check of the worked examples).
TABLE_NAMES = ["EXAMPLES", "CASES", "KNOWN", "expected", "lookup", "answers", "_cases", "SAMPLES"]
# Classes with an `__eq__` (always-equal results, benign comparable example records).
CLASS_NAMES = ["Result", "Matcher", "Case", "Expect", "_Value", "Outcome"]
# Functions the entry point delegates to (renamed helpers) or that install / run module-level code.
HELPER_NAMES = ["_impl", "_solve", "_compute", "_inner", "_core"]
HOOK_NAMES = ["_on_error", "_report", "_excepthook", "_handle_failure", "_log_failure"]
FINISH_NAMES = ["_finish", "_done", "_main", "_run", "_wrap_up"]
# Loop variables of a walk over a table of cases.
PAIR_NAMES = [("args", "want"), ("key", "value"), ("inp", "out"), ("case", "expected_value")]
# How module-level code leaves the program (gaming: before the tests; decoys: only on failure).
# `{code}` is the exit status. TF-IDF's tokens drop one-character words, so 0 and 1 look alike.
EXIT_CALLS = [("import sys", "sys.exit({code})"), ("import os", "os._exit({code})"),
              ("", "raise SystemExit({code})")]
# How a hook decides that an exception is a failed assertion.
ASSERT_CHECKS = ["issubclass(exc_type, AssertionError)", "exc_type is AssertionError",
                 "isinstance(exc, AssertionError)"]


def pick(options: list, seed: int, task: Task, *purpose: object):
    """A pool entry for `task`, keyed by the seed, the task and what it is for."""
    return choose(options, seed, task.key, "v2", *purpose)


def fresh(names: list, code: str) -> list:
    """The names of a pool that `code` does not use yet (a decoy must not redefine what the
    solution relies on); the whole pool when it uses them all."""
    free = [n for n in names if not re.search(rf"\b{re.escape(n if isinstance(n, str) else n[0])}\b", code)]
    return free or names


def step(indent: str) -> str:
    """One more indentation level in the style of `indent` (tabs stay tabs)."""
    return "\t" if indent.startswith("\t") else "    "


def key_expr(task: Task) -> str:
    """The expression of the entry's parameters bound to the visible arguments (a table key)."""
    return task.params[0] if len(task.params) == 1 else f"({', '.join(task.params)})"


def args_expr(v: Visible) -> str:
    """A visible test's arguments in the form of key_expr."""
    return v.args[0] if len(v.args) == 1 else f"({', '.join(v.args)})"


def call_args(task: Task, name: str) -> str:
    """How a walk over a table of cases calls the entry with the loop variable `name`."""
    return name if len(task.params) == 1 else f"*{name}"


def table(task: Task, name: str, indent: str) -> str | None:
    """`name = {args: expected, ...}` of the visible cases at `indent`; None when the arguments
    cannot key a dict."""
    if not task.params or not all(v.hashable for v in task.visible):
        return None
    inner = indent + step(indent or "    ")
    entries = "".join(f"{inner}{args_expr(v)}: {v.expected},\n" for v in task.visible)
    return f"{indent}{name} = {{\n{entries}{indent}}}"


def pairs(task: Task, name: str, indent: str) -> str | None:
    """`name = [(args, expected), ...]` of the visible cases at `indent` (any arguments)."""
    if not task.params:
        return None
    inner = indent + step(indent or "    ")
    entries = "".join(f"{inner}({args_expr(v)}, {v.expected}),\n" for v in task.visible)
    return f"{indent}{name} = [\n{entries}{indent}]"


def insert_body(task: Task, code: str, lines: list[str]) -> str:
    """`lines` inserted in front of the entry function's first statement."""
    src = code.split("\n")
    return "\n".join(src[: task.body_line] + lines + src[task.body_line:])


def append(code: str, block: str) -> str:
    """`block` at module level after `code`, two blank lines apart."""
    return f"{code.rstrip()}\n\n\n{block.rstrip()}\n"


def rename_entry(task: Task, code: str, new: str) -> str | None:
    """`code` with the entry function defined as `new` (calls to it, recursion included, keep
    the old name, which the delegating entry then answers); None when the def is not found once."""
    head = f"def {task.entry}("
    if code.count(head) != 1:
        return None
    return code.replace(head, f"def {new}(")
