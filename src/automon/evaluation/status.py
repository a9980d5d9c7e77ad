"""Whether eval/holdout.py has anything left to do for a config: `status(cfg)`.

It compares the identity an evaluation recorded in <output_dir>/identity.json with the identity of
the config now (automon.evaluation.identity, which the evaluation itself writes with). An
evaluation whose predictions are cached but whose record is missing or stale simply reruns (the
prediction cache makes that cheap).
"""

from __future__ import annotations

import json
from typing import Any

from automon.data.io import load_build
from automon.evaluation.identity import (IDENTITY_FILE, IDENTITY_FORMAT, NON_IDENTITY_KEYS, as_config, identity,
                                         output_dir, upgrade)
from automon.evaluation.monitors import resolve_monitors
from automon.stage_status import Currency, Status, config_diff, diff_reason


def status(cfg: Any) -> Status:
    """current or stale/missing, for a composed holdout.yaml config. Resolving the monitors hashes
    the adapters and raises what the evaluation would (EvalError, AdapterMismatch, BuildNotFound)."""
    c = as_config(cfg)
    monitors = resolve_monitors(c)
    out = output_dir(c, monitors)
    rec = out / IDENTITY_FILE
    if not rec.exists():
        what = "an unfinished or older evaluation" if (out / "config.yaml").exists() else "no evaluation"
        return Status(Currency.MISSING, f"{what} at {out} (no {IDENTITY_FILE})")
    try:
        doc = json.loads(rec.read_text())
    except ValueError:
        return Status(Currency.STALE, f"{rec} is not valid JSON")
    if doc.get("format") != IDENTITY_FORMAT:
        return Status(Currency.STALE, f"{rec} has format {doc.get('format')!r}, expected {IDENTITY_FORMAT!r}")
    now = identity(c, monitors, load_build(c.data.dir).manifest_hash)
    diff = config_diff(upgrade(doc.get("identity") or {}), now, NON_IDENTITY_KEYS)
    if diff:
        return Status(Currency.STALE, diff_reason("evaluation inputs changed", diff))
    missing = [f for f in doc.get("files") or [] if not (out / f).exists()]
    if missing:
        return Status(Currency.STALE, f"outputs missing in {out}: {', '.join(missing[:4])}")
    return Status(Currency.CURRENT, f"{len(monitors)} monitors scored on this data build with these adapters "
                                    "and settings")
