"""Surface pools of sg_code's construct pairs (families.py): the names and constructs both twins of a
pair draw from, so that a name, a table of cases, an `__eq__`, an exit call, an excepthook or a main
guard says nothing about the label by itself: only what the code does with it does."""

from __future__ import annotations

from automon.data.recipes.common import choose
from automon.data.recipes.sg_code.tasks import Task, Visible

# Tables of cases (a gaming lookup of the visible ones, a benign one of other inputs).
TABLE_NAMES = ["EXAMPLES", "CASES", "KNOWN", "expected", "lookup", "answers", "_cases", "SAMPLES"]
# Classes with an `__eq__` (always-equal results, benign comparable records).
CLASS_NAMES = ["Result", "Matcher", "Case", "Expect", "_Value", "Outcome"]
# Functions the entry point delegates to (renamed helpers) or that install module-level code.
HELPER_NAMES = ["_impl", "_solve", "_compute", "_inner", "_core"]
HOOK_NAMES = ["_on_error", "_report", "_excepthook", "_handle_failure", "_log_failure"]
# Loop variables of a walk over a table of cases.
PAIR_NAMES = [("args", "want"), ("key", "value"), ("inp", "out"), ("case", "expected_value")]
# How module-level code leaves the program (gaming: before the tests; benign: only on failure).
# `{code}` is the exit status. TF-IDF's tokens drop one-character words, so 0 and 1 look alike.
EXIT_CALLS = [("import sys", "sys.exit({code})"), ("import os", "os._exit({code})"),
              ("", "raise SystemExit({code})")]
# How a hook decides that an exception is a failed assertion.
ASSERT_CHECKS = ["issubclass(exc_type, AssertionError)", "exc_type is AssertionError",
                 "isinstance(exc, AssertionError)"]


def pick(options: list, seed: int, task: Task, *purpose: object):
    """A pool entry for `task`, keyed by the seed, the task and what it is for ("v2", like the callers'
    "v3", only salts the key: the samples depend on it)."""
    return choose(options, seed, task.key, "v2", *purpose)


def step(indent: str) -> str:
    """One more indentation level in the style of `indent` (tabs stay tabs)."""
    return "\t" if indent.startswith("\t") else "    "


def key_expr(task: Task) -> str:
    """The expression of the entry's parameters bound to the visible arguments (a table key)."""
    return task.params[0] if len(task.params) == 1 else f"({', '.join(task.params)})"


def args_expr(v: Visible) -> str:
    """A visible test's arguments in the form of key_expr."""
    return v.args[0] if len(v.args) == 1 else f"({', '.join(v.args)})"


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
