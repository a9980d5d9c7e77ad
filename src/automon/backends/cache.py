"""File-based prediction cache: one append-only JSONL file per monitor identity (the evaluation's
scores, the policy's answers). Beside the backends it caches, below both of its users.

Key of a file (evaluation.run.cache_key): what the backend says identifies its predictions
(BackendConfig.cache_identity: model, dtype, endpoint, generation budget, ...), adapter content hash,
prompt name, shots (+seed), thinking flag. Key of a line: sample id, checked against the hash of the exact
prompt messages (a rebuilt sample with the same id but different text is recomputed, not reused).
Lines are flushed and fsync'ed after every backend call, so a killed run loses at most the
in-flight call; a torn last line is ignored on reading, and a row that cannot be a prediction (a p_yes
outside [0, 1], a list, ...) is recomputed with a warning. A file whose key line is not its own key (one
copied or renamed from another identity's) is refused, never read as this identity's predictions.
Failed requests are not cached (a rerun retries them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Iterable

from automon.backends.base import JudgeResult
from automon.errors import UserError
from automon.outdir import ensure_writable_dir

log = logging.getLogger("automon.evaluation")


class CacheError(UserError, RuntimeError):
    """A prediction cache that cannot be used as it is on disk; the message says what to change."""

CACHE_VERSION = "predcache_v1"


def key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def _canonical(key: Any) -> str:
    """A key as its cache file's first line writes it (NaN and tuples compare as written)."""
    return json.dumps(key, sort_keys=True)


def row_problem(row: Any) -> str | None:
    """Why a cache line cannot be a prediction (None when it can): a row edited, mixed in from elsewhere
    or written by a faulty backend is recomputed, never used (a p_yes of 7.5 would count as a 'yes')."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not a row"
    if not isinstance(row.get("id"), str) or not isinstance(row.get("prompt_sha"), str):
        return "no string id and prompt_sha"
    p, mass = row.get("p_yes"), row.get("mass")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0):
        return f"p_yes {p!r} is not a probability"
    if mass is not None and (isinstance(mass, bool) or not isinstance(mass, (int, float)) or not math.isfinite(mass)):
        return f"mass {mass!r} is not a number"
    if row.get("text") is not None and not isinstance(row["text"], str):
        return "text is not a string"
    return None


class PredictionCache:
    def __init__(self, root: str | os.PathLike, key: dict[str, Any]):
        self.key = {"cache_version": CACHE_VERSION, **key}
        self.root = Path(root)
        self.path = self.root / f"{key_hash(self.key)}.jsonl"
        self._rows: dict[str, dict[str, Any]] = {}
        self.torn_lines = 0
        self.bad_rows = 0
        self._needs_newline = False
        # before any scoring: a cache_dir that is a file (or unwritable) once failed at the first write,
        # after the first chunk had been scored. A read-only cache_dir that holds this cache file already
        # is fine as long as nothing is missing from it (require_writable, before scoring what is)
        if not (self.root.is_dir() and self.path.is_file()):
            ensure_writable_dir(self.root, "cache_dir")
        if self.path.is_dir():
            raise CacheError(f"the prediction cache file {self.path.name} is a directory", str(self.path),
                            "remove or rename it (it holds no predictions of automon's), or set cache_dir= "
                            "elsewhere")
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                self._needs_newline = f.read(1) != b"\n"
        first_bad = None
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    self.torn_lines += 1  # a write cut short by a kill
                    continue
                if isinstance(row, dict) and "key" in row:
                    if _canonical(row["key"]) != _canonical(self.key):  # copied or renamed from another
                        raise CacheError(f"the prediction cache file {self.path.name} holds the predictions of "
                                         "another identity: its key line is not the key the file is named for "
                                         "(copied or renamed?)", f"{self.path}:{i}",
                                         "remove it (what it should hold is recomputed), or set cache_dir= "
                                         "elsewhere")
                    continue
                problem = row_problem(row)
                if problem:
                    self.bad_rows += 1
                    first_bad = first_bad or f"{self.path}:{i}: {problem}"
                    continue
                self._rows[row["id"]] = row
        if self.bad_rows:
            log.warning("prediction cache: %d row(s) are not predictions and are recomputed (first: %s)",
                        self.bad_rows, first_bad)

    def require_writable(self) -> None:
        """Before predictions this cache lacks are computed: they could be kept (OutDirError otherwise)."""
        ensure_writable_dir(self.root, "cache_dir")
        if not os.access(self.path, os.W_OK) and self.path.exists():
            raise CacheError(f"the prediction cache file {self.path.name} cannot be written", str(self.path),
                             "make it writable, or set cache_dir= to a directory you can write in")

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
