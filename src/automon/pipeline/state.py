"""The pipeline's record of what it ran and the hashes that make a stage "current".

`<state_dir>/pipeline_state.json` holds, per stage, the command, the hashes of its inputs and
outputs, and timings. It also caches file hashes by (size, mtime) so that a second run of a large
build does not re-read gigabytes to find that nothing changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from automon.data.io import sha256_file

STATE_FORMAT = "automon-pipeline-state-v1"
STATE_FILE = "pipeline_state.json"


class State:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"format": STATE_FORMAT, "stages": {}, "hash_cache": {}}
        if path.exists():
            try:
                d = json.loads(path.read_text())
                if d.get("format") == STATE_FORMAT:
                    self.data = d
                    self.data.setdefault("stages", {})
                    self.data.setdefault("hash_cache", {})
            except (OSError, ValueError):
                pass  # an unreadable record is no record: every stage is checked from its files

    @property
    def stages(self) -> dict[str, Any]:
        return self.data["stages"]

    def sha256(self, path: Path) -> str:
        """sha256 of a file, reusing the cached value while its size and mtime are unchanged."""
        st = path.stat()
        key = str(path.resolve())
        hit = self.data["hash_cache"].get(key)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        h = sha256_file(path)
        self.data["hash_cache"][key] = [st.st_size, st.st_mtime_ns, h]
        return h

    def dir_hash(self, d: Path) -> str:
        """sha256 over the (relative path, sha256) of every file under `d` (the adapter's content hash)."""
        h = hashlib.sha256()
        for p in sorted(q for q in d.rglob("*") if q.is_file()):
            h.update(p.relative_to(d).as_posix().encode() + b"\0" + self.sha256(p).encode() + b"\n")
        return h.hexdigest()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        # drop cache entries of files that are gone
        self.data["hash_cache"] = {k: v for k, v in self.data["hash_cache"].items() if os.path.exists(k)}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def config_diff(have: Any, want: Any, prefix: str = "") -> list[str]:
    """Keys whose values differ between two plain (YAML/JSON-loaded) configs."""
    if isinstance(have, dict) and isinstance(want, dict):
        out: list[str] = []
        for k in sorted(set(have) | set(want), key=str):
            if k not in have:
                out.append(f"{prefix}{k}: <absent> -> {want[k]!r}")
            elif k not in want:
                out.append(f"{prefix}{k}: {have[k]!r} -> <absent>")
            else:
                out += config_diff(have[k], want[k], f"{prefix}{k}.")
        return out
    if have != want and not (_num(have) and _num(want) and float(have) == float(want)):
        return [f"{prefix[:-1]}: {have!r} -> {want!r}"]
    return []


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
