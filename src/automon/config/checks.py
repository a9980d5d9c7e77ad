"""Config checks that look outside the config (the environment, the file system), shared by the stages:
run at start-up, before a model loads, so a setting that cannot work fails in seconds."""

from __future__ import annotations

import netrc
import os
from typing import Any
from urllib.parse import urlparse

WANDB_MODES = ("offline", "online", "disabled")


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
        from automon.data.io import OutDirError, ensure_writable_dir

        if not str(w.dir).strip():
            return "wandb.dir= is empty (wandb.dir); give a directory, or wandb.dir=null (inside the output directory)"
        try:
            ensure_writable_dir(w.dir, "wandb.dir")
        except OutDirError as e:
            return e.line()
    return None
