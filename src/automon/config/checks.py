"""Config checks that look outside the config (the environment, the file system), shared by the stages:
run at start-up, before a model loads, so a setting that cannot work fails in seconds."""

from __future__ import annotations

import netrc
import os
from typing import Any
from urllib.parse import urlparse

from automon.outdir import OutDirError, ensure_writable_dir

WANDB_MODES = ("offline", "online", "disabled")
DTYPES = ("bfloat16", "float16", "float32", "auto")


def wandb_key_found() -> bool:
    """Whether wandb online can log in without asking: WANDB_API_KEY, or `wandb login`'s netrc entry."""
    if os.environ.get("WANDB_API_KEY", "").strip():
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_problem(w: Any) -> str | None:
    """Why the `wandb` section cannot work here (None: it can): online without an API key would stop at
    wandb.init with a prompt or a traceback after the model loaded; wandb.dir must be writable."""
    if w.mode not in WANDB_MODES:
        return f"wandb.mode={w.mode!r} is not a valid value (wandb.mode); use one of: {', '.join(WANDB_MODES)}"
    if w.mode == "online" and not wandb_key_found():
        return ("wandb.mode=online needs a wandb API key, and none is set (no WANDB_API_KEY, no api.wandb.ai "
                "entry in ~/.netrc) (wandb.mode); run `wandb login` or set WANDB_API_KEY, or use wandb.mode=offline "
                "(the default: sync later with `wandb sync`) or wandb.mode=disabled")
    if w.mode != "disabled" and w.dir is not None:
        if not str(w.dir).strip():
            return "wandb.dir= is empty (wandb.dir); give a directory, or wandb.dir=null (inside the output directory)"
        try:
            ensure_writable_dir(w.dir, "wandb.dir")
        except OutDirError as e:
            return e.line()
    return None


def common_problem(c: Any) -> str | None:
    """The sections training and evaluation share (model, data, wandb, output_dir): an empty name or
    path means nothing here (output_dir= would write into the current directory), and a context length
    below a prompt's size is no model's."""
    m = c.model
    for key, value in (("model.name", m.name), ("model.pretrained", m.pretrained), ("data.dir", c.data.dir),
                       ("wandb.project", c.wandb.project)):
        if not str(value).strip():
            return f"{key}= is empty ({key}); give a value (the default comes from the chosen model= / the schema)"
    for key in ("output_dir", "wandb.dir"):
        value = c.wandb.dir if key == "wandb.dir" else c.output_dir
        if value is not None and not str(value).strip():
            return f"{key}= is empty ({key}); give a directory, or {key}=null for the default"
    if m.max_position_embeddings < 256:
        return (f"model.max_position_embeddings={m.max_position_embeddings} is out of range "
                "(model.max_position_embeddings); use the model's context length (>= 256)")
    return None
