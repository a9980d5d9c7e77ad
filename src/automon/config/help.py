"""`--help` of the entry scripts: their usage lines, then one line per key from the config schema.

The key descriptions are the schema's own comments (the `# ...` lines above a field and the comment
after it), so they are written once, beside the field, and cannot drift from it. A conf/*.yaml sets

    hydra:
      help:
        template: ${automon_help:sft}

and `register_help()` (called by each schema module's `register`) provides the resolver; the usage
lines are the entry script's docstring.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from typing import Any

from omegaconf import OmegaConf

_FIELD = re.compile(r"^(\s+)(\w+)\s*:[^#]*?(?:#\s?(.*))?$")
_COMMENT = re.compile(r"^\s+#\s?(.*)$")


def field_comments(cls: type) -> dict[str, str]:
    """{field: its comment} from the class source: the comment lines right above it and the one after it."""
    out: dict[str, str] = {}
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return out
    above: list[str] = []
    for line in lines[1:]:
        if m := _COMMENT.match(line):
            above.append(m.group(1).strip())
            continue
        m = _FIELD.match(line)
        if m and m.group(2) in {f.name for f in dataclasses.fields(cls)}:
            text = " ".join([*above, (m.group(3) or "").strip()]).strip()
            out[m.group(2)] = text
        above = []
    return out


def _dataclass_of(tp: Any) -> type | None:
    if typing.get_origin(tp) is typing.Union:  # Optional[X]
        tp = next((a for a in typing.get_args(tp) if a is not type(None)), None)
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def key_lines(schema: type, prefix: str = "", width: int = 30, inherited: str = "") -> list[str]:
    """`  key  description` for every field of `schema`, nested sections flattened (`train.lora.r`); a
    field with no comment of its own gets its section's (`test.sg_code`: the comment on `test`)."""
    hints = typing.get_type_hints(schema)
    comments = {}
    for base in reversed(schema.__mro__):  # a subclass's comment wins over its base's
        if dataclasses.is_dataclass(base):
            comments.update(field_comments(base))
    lines = []
    for f in dataclasses.fields(schema):
        if f.name == "name" and prefix:  # a group's name is chosen with its option (model=..., backend=...)
            continue
        key = f"{prefix}{f.name}"
        sub = _dataclass_of(hints[f.name])
        if sub is not None:
            lines += key_lines(sub, f"{key}.", width, comments.get(f.name, ""))
            continue
        # a generated field (a subset's wordings key) carries its text in its metadata
        lines.append(f"  {key:<{width}} {comments.get(f.name) or f.metadata.get('doc') or inherited}".rstrip())
    return lines


def help_text(usage: str, schema: type, notes: str = "") -> str:
    """The template Hydra prints for --help ($CONFIG: the composed config, with the overrides given)."""
    body = [usage.strip(), "", "Keys (key=value on the command line; defaults in the config below):",
            *key_lines(schema)]
    if notes:
        body += ["", notes.strip()]
    text = "\n".join(body).replace("$", "$$")  # string.Template: only $CONFIG is a placeholder
    return text + "\n\n== Config (with the overrides given) ==\n$CONFIG"


_SCHEMAS: dict[str, tuple[str, str]] = {
    # name -> (module:class of the schema, notes)
    "build": ("automon.config.build:BuildConfig",
              "Groups: wordings=<v9>, sg_code=<default>. Every key: src/automon/config/build.py; "
              "the data: docs/data.md; errors: docs/errors.md."),
    "audit": ("automon.config.build:AuditRunConfig",
              "The audit that every build runs (audit.*, docs/data.md), for a build that exists already."),
    "sft": ("automon.config.train:SFTConfig",
            "Groups: subset=<name>|[a,b]|all, model=<conf/model/*.yaml>, prompt=<name>, trainer=auto|peft|unsloth. "
            "Every key: src/automon/config/train.py; docs/training.md."),
    "probe": ("automon.config.probe:ProbeTrainConfig",
              "Every key: src/automon/config/probe.py; docs/evaluation.md (probes)."),
    "holdout": ("automon.config.eval:HoldoutConfig",
                "Groups: model=<conf/model/*.yaml>, prompt=<name>, backend=vllm|hf|openai|probe|reference|inspect_log (each backend adds "
                "its own backend.* keys: src/automon/backends/<backend>.py). Every key: "
                "src/automon/config/eval.py; docs/evaluation.md."),
}


def _resolve_help(name: str) -> str:
    import importlib

    target, notes = _SCHEMAS[name]
    module, cls = target.split(":")
    schema = getattr(importlib.import_module(module), cls)
    usage = (getattr(sys.modules.get("__main__"), "__doc__", None) or "").strip() or f"{name}: see {target}"
    return help_text(usage, schema, notes)


def register_help() -> None:
    if not OmegaConf.has_resolver("automon_help"):
        OmegaConf.register_new_resolver("automon_help", _resolve_help)
