"""Whether data_build/build.py has anything left to do for a config: `status(cfg)`.

A build at `cfg.out` is current when its manifest was written by this build version for this
config (`config_identity` in automon.data.identity, the same dict the build records), every output
file still has the sha256 the manifest lists, and every source still has the origin the manifest
recorded (local files: their sha256, wherever the sources directory now is). data_build/build.py
names the status in its refusal to overwrite; pipeline.py asks `status` before running the build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from automon.data.identity import BUILD_VERSION, config_identity, source_identity
from automon.data.io import sha256_file
from automon.sources import SourceError, source_origin
from automon.stage_status import Currency, Status, config_diff, diff_reason


def status(cfg: Any) -> Status:
    """current, stale (a build of another config, damaged files or changed sources: rebuilding
    needs overwrite=true) or missing, for a composed build.yaml config."""
    out = Path(cfg.out)
    mf = out / "manifest.json"
    if not mf.exists():
        if out.exists():
            return Status(Currency.STALE, f"{out} exists but holds no build (no manifest.json)")
        return Status(Currency.MISSING, f"no build at {out} yet")
    try:
        m = json.loads(mf.read_text())
    except ValueError:
        return Status(Currency.STALE, f"{mf} is not valid JSON")
    if m.get("build_version") != BUILD_VERSION:
        return Status(Currency.STALE, f"built by {m.get('build_version')}, this code builds {BUILD_VERSION}")
    diff = config_diff(m.get("config") or {}, config_identity(cfg))
    if diff:
        return Status(Currency.STALE, diff_reason("build config changed", diff))
    files = m.get("files") or {}
    if not files:
        return Status(Currency.STALE, f"{mf} lists no output files")
    for name, sha in files.items():
        p = out / name
        if not p.exists():
            return Status(Currency.STALE, f"{p} is missing")
        if sha256_file(p) != sha:
            return Status(Currency.STALE, f"{p} does not match its sha256 in manifest.json")
    # The recorded origin of each source the build read, recomputed the way the build records it
    # (local files are hashed: an edited source makes the build stale).
    src = cfg.sources
    for name, recorded in (m.get("sources") or {}).items():
        try:
            now = source_identity(source_origin(name, src.root, src.revisions.get(name)))
        except SourceError as e:
            return Status(Currency.STALE, str(e))
        if now != recorded:
            return Status(Currency.STALE, f"source {name} changed since the build (files, kind or revision)")
    return Status(Currency.CURRENT, f"manifest and its {len(files)} files match (sha256), same config and sources")
