"""What train/sft.py does around `run(cfg)`: a pre-flight check of the command line and error reports.

Hydra itself rejects an unknown group option or key with exit status 1 and, for a key typo, without
listing the valid keys. `preflight` checks the overrides first against conf/ and the SFTConfig
schema, so `subset=nope` and `train.lrr=1` exit 2 with the valid choices.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path

from automon.config import CONF_DIR
from automon.config.train import SFTConfig
from automon.subsets import ALL
from automon.subsets import names as subset_names

GROUPS = ("subset", "model", "prompt", "trainer")


def group_options(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    files = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
    if group == "subset":  # the registry's options (config.train.register_subset_options), then any YAML
        stored = [*subset_names(), ALL]
        return stored + [f for f in files if f not in stored]
    return files


def _split_values(value: str) -> list[str] | None:
    """Option names in `a`, `a,b` (sweep) or `[a,b]` (list); None for sweep functions we don't parse."""
    if "(" in value or "$" in value:
        return None
    v = value.strip()
    if v.startswith("[") and v.endswith("]"):
        v = v[1:-1]
    return [x.strip() for x in v.split(",") if x.strip()]


def _is_dict_type(tp) -> bool:
    return typing.get_origin(tp) in (dict, typing.Dict) or tp in (dict, typing.Dict)


def _check_key(path: list[str]) -> str | None:
    """None if `a.b.c` is a key of SFTConfig, else an error message listing the valid keys."""
    node = SFTConfig
    hints = typing.get_type_hints(node)
    for i, part in enumerate(path):
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            where = ".".join(path[:i]) or "the top level"
            return (f"unknown config key {'.'.join(path)!r}; valid keys under {where}: {', '.join(names)}")
        tp = hints[part]
        if typing.get_origin(tp) is typing.Union:  # Optional[X]
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        if _is_dict_type(tp):
            return None
        if dataclasses.is_dataclass(tp):
            node, hints = tp, typing.get_type_hints(tp)
        elif i < len(path) - 1:
            return f"config key {'.'.join(path[:i + 1])!r} is a value, not a section: {'.'.join(path)!r} is invalid"
    return None


def preflight(argv: list[str], conf_dir: Path = CONF_DIR) -> list[str]:
    """Problems with the command-line overrides (empty list = fine)."""
    problems = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key.startswith(("+", "~")) or key.startswith("hydra") or key.startswith("hydra/"):
            continue
        if key in GROUPS:
            options = group_options(key, conf_dir)
            if not options:
                continue  # conf dir not found: leave it to Hydra
            names = _split_values(value)
            bad = [n for n in (names or []) if n not in options]
            if bad:
                what = "subset" if key == "subset" else f"{key} option"
                extra = " Lists combine subsets: subset=[safety_qa,sg_code]." if key == "subset" else ""
                problems.append(f"unknown {what} {', '.join(map(repr, bad))}; valid: {', '.join(options)}.{extra}")
            continue
        if "/" in key:
            continue  # another config group (e.g. hydra/launcher): Hydra checks it
        msg = _check_key(key.split("."))
        if msg:
            problems.append(msg)
    return problems


def preflight_or_exit(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    problems = preflight(argv, conf_dir)
    if problems:  # one line however many: the convention every entry point keeps (automon.errors)
        head = f"{len(problems)} problems in the command line: " if len(problems) > 1 else ""
        print(f"error: {head}{' | '.join(p.rstrip('.') for p in problems)}", file=sys.stderr)
        sys.exit(2)


