"""File-based prediction cache: one append-only JSONL file per monitor identity.

Key of a file (evaluation.run.cache_key): what the backend says identifies its predictions
(BackendConfig.cache_identity: model, dtype, endpoint, generation budget, ...), adapter content hash,
prompt name, shots (+seed), thinking flag. Key of a line: sample id, checked against the hash of the exact
prompt messages (a rebuilt sample with the same id but different text is recomputed, not reused).
Lines are flushed and fsync'ed after every backend call, so a killed run loses at most the
in-flight call; a torn last line is ignored on reading. Failed requests are not cached (a rerun
retries them).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from automon.backends.base import JudgeResult

CACHE_VERSION = "predcache_v1"


def key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


class PredictionCache:
    def __init__(self, root: str | os.PathLike, key: dict[str, Any]):
        self.key = {"cache_version": CACHE_VERSION, **key}
        self.root = Path(root)
        self.path = self.root / f"{key_hash(self.key)}.jsonl"
        self._rows: dict[str, dict[str, Any]] = {}
        self.torn_lines = 0
        self._needs_newline = False
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                self._needs_newline = f.read(1) != b"\n"
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    self.torn_lines += 1  # a write cut short by a kill
                    continue
                if "key" in row:
                    continue
                self._rows[row["id"]] = row

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, sample_id: str, prompt_sha: str) -> JudgeResult | None:
        row = self._rows.get(sample_id)
        if row is None or row.get("prompt_sha") != prompt_sha:
            return None
        return JudgeResult(p_yes=row.get("p_yes"), text=row.get("text"), mass=row.get("mass"))

    def put_many(self, items: Iterable[tuple[str, str, JudgeResult]]) -> int:
        lines = []
        for sid, sha, res in items:
            if res.error is not None:
                continue
            row = {"id": sid, "prompt_sha": sha, "p_yes": res.p_yes, "text": res.text, "mass": res.mass}
            self._rows[sid] = row
            lines.append(json.dumps(row, ensure_ascii=False))
        if not lines:
            return 0
        self.root.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        with open(self.path, "a", encoding="utf-8") as f:
            if self._needs_newline:  # finish a torn line so the new rows start on their own
                f.write("\n")
                self._needs_newline = False
            if new:
                f.write(json.dumps({"key": self.key}, sort_keys=True) + "\n")
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return len(lines)
