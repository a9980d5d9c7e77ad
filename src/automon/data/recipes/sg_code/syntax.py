"""Reading Python source from the datasets: parsing without their warnings, the functions a
source defines. Shared by the graders, the task parser, the mutation engine and the extras."""

from __future__ import annotations

import ast
import warnings


def parse(source: str) -> ast.Module:
    """ast.parse, quiet about the sources' invalid escape sequences ("\\d" in a plain string)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
        return ast.parse(source)


def function_names(code: str) -> list[str]:
    """The top-level functions `code` defines, in order; [] when it does not parse."""
    try:
        return [n.name for n in parse(code).body if isinstance(n, ast.FunctionDef)]
    except SyntaxError:
        return []
