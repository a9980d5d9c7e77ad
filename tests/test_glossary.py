"""docs/glossary.md names what the code names: every `automon.<module>[.<name>]`, every
`<Class>.<attribute>` and every registry constant it cites exists, and each evaluation step's
function is in the module its row says."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

GLOSSARY = Path(__file__).resolve().parents[1] / "docs" / "glossary.md"
# Where a bare class or constant the glossary cites (`SubsetSpec.check`, `FIT_VERSION`) is looked up.
NAMESPACES = ("automon.schema", "automon.monitors", "automon.subsets", "automon.backends", "automon.adapter_meta",
              "automon.prompts", "automon.prompts.templates", "automon.config.wordings", "automon.report.columns",
              "automon.evaluation.transforms")


def _cells() -> list[list[str]]:
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in GLOSSARY.read_text().splitlines()
            if ln.startswith("|") and not ln.startswith("|---")]


def _dotted(path: str) -> Any:
    """automon.a.b.C.d -> the object (the longest importable module, then attributes)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ModuleNotFoundError(path)


def _is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


def _has(cls: Any, attr: str) -> bool:
    return hasattr(cls, attr) or (dataclasses.is_dataclass(cls) and attr in {f.name for f in dataclasses.fields(cls)})


def _bare(name: str) -> Any:
    for ns in NAMESPACES:
        mod = importlib.import_module(ns)
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(f"{name} in none of {', '.join(NAMESPACES)}")


def test_every_code_name_the_glossary_cites_exists():
    missing = []
    for row in _cells():
        for tok in re.findall(r"`([^`]+)`", " ".join(row)):
            try:
                if re.fullmatch(r"automon(\.\w+)+", tok):
                    _dotted(tok)
                elif m := re.fullmatch(r"([A-Z]\w*)\.(\w+)", tok):
                    if not _has(_bare(m[1]), m[2]):
                        raise AttributeError(f"{m[1]} has no {m[2]}")
                elif re.fullmatch(r"[A-Z][A-Za-z]+[a-z]\w*|[A-Z][A-Z_]+", tok):  # a class or a constant
                    _bare(tok)
            except (AttributeError, ModuleNotFoundError) as e:
                missing.append(f"`{tok}`: {e}")
    assert not missing, "docs/glossary.md cites names the code does not have:\n" + "\n".join(missing)


def test_each_evaluation_step_names_a_function_of_its_module():
    rows = _cells()
    start = next(i for i, r in enumerate(rows) if r[:3] == ["step", "function", "module"])
    steps = [r for r in rows[start + 1:] if len(r) == 3 and re.fullmatch(r"`automon(\.\w+)+`", r[2])
             and _is_module(r[2].strip("`"))]
    assert len(steps) >= 7
    for step, functions, module in steps:
        mod = importlib.import_module(module.strip("`"))
        names = [t for t in re.findall(r"`([^`]+)`", functions) if re.fullmatch(r"\w+", t)]
        assert names and all(hasattr(mod, n) for n in names), (step, names, mod.__name__)
