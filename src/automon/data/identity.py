"""What a data build is, for the build that records it and for `status` that compares it.

`BUILD_VERSION` names the build's logic; `config_identity(cfg)` is the build config as manifest.json
records it. Both the build (automon.data.build) and its status (automon.data.status) import them
from here, so neither imports the other for them.
"""

from __future__ import annotations

import json
from typing import Any

from omegaconf import OmegaConf

BUILD_VERSION = "build-v1"

# Where the build goes and whether it may replace one: not what it holds.
NON_IDENTITY_KEYS = ("out", "overwrite")


def config_identity(cfg: Any) -> dict:
    """The build config as manifest.json records it (plain, resolved, JSON-shaped)."""
    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    ident = {k: v for k, v in plain.items() if k not in NON_IDENTITY_KEYS}
    if isinstance(ident.get("wordings"), dict):  # card text, not data (WordingsConfig.shortcut_notes)
        ident["wordings"] = {k: v for k, v in ident["wordings"].items() if k != "shortcut_notes"}
    policy = ident.pop("policy", None)
    # The policy node decides nothing in a template build (whose identity stays as it was); its
    # cache path says where answers are kept, not what they are.
    if plain.get("generator") == "policy" and policy is not None:
        ident["policy"] = {k: v for k, v in policy.items() if k != "cache"}
    return json.loads(json.dumps(ident))
