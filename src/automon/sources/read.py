"""Read a source row by row, from local files (sources.root) or the hub, with precise errors."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from automon.sources.registry import SOURCES, SourceSpec


class SourceError(ValueError):
    """A malformed or missing source row; the message names file and line."""


@dataclass
class Row:
    source: str
    file: str   # path relative to sources.root, or hub id / URL
    line: int   # 1-based line (JSONL/CSV) or record index (JSON arrays, hub rows)
    data: dict[str, Any]

    @property
    def ref(self) -> str:
        return f"{self.file}:{self.line}"


def _spec(name: str) -> SourceSpec:
    try:
        return SOURCES[name]
    except KeyError:
        raise SourceError(f"unknown source {name!r}; known: {', '.join(SOURCES)}") from None


def local_files(spec: SourceSpec, root: Path) -> list[Path]:
    files: list[Path] = []
    for pattern in spec.local:
        hits = sorted(root.glob(pattern))
        if not hits:
            raise SourceError(f"source {spec.name}: no file matches {root / pattern}. Check sources.root "
                              f"(it should point at shared/data/raw) or drop sources.root to read from the hub")
        files.extend(hits)
    return files


def _iter_local_file(spec: SourceSpec, path: Path) -> Iterator[tuple[int, Any]]:
    """(line or index, raw record) pairs; raw record is a dict, or an Exception for a bad line."""
    if spec.fmt in ("jsonl", "jsonl.gz"):
        opener = gzip.open if spec.fmt == "jsonl.gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as e:
                    yield lineno, e
    elif spec.fmt == "json":
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise SourceError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from e
        if not isinstance(records, list):
            raise SourceError(f"{path}: expected a JSON array of records, got {type(records).__name__}")
        for i, rec in enumerate(records, 1):
            yield i, rec
    elif spec.fmt in ("csv", "csv_noheader"):
        text = path.read_text(encoding="utf-8-sig")
        reader = csv.reader(io.StringIO(text, newline=""))
        header = list(spec.csv_columns) if spec.fmt == "csv_noheader" else next(reader)
        for row in reader:
            lineno = reader.line_num
            if len(row) != len(header):
                yield lineno, ValueError(f"expected {len(header)} columns, got {len(row)}")
                continue
            rec = dict(zip(header, row))
            if spec.fmt == "csv_noheader":
                rec["subject"] = path.stem.rsplit("_", 1)[0]
            yield lineno, rec
    else:  # pragma: no cover - registry is static
        raise SourceError(f"source {spec.name}: unknown format {spec.fmt}")


def _check(spec: SourceSpec, rec: Any) -> str | None:
    if isinstance(rec, Exception):
        return f"unparseable: {rec}"
    if not isinstance(rec, dict):
        return f"expected an object, got {type(rec).__name__}"
    missing = [k for k in spec.required if k not in rec or rec[k] is None]
    if missing:
        return f"missing field(s) {missing}"
    return None


def read_source(name: str, root: str | Path | None, on_malformed: str = "stop",
                malformed: dict[str, int] | None = None, revision: str | None = None) -> Iterator[Row]:
    """Yield the rows of source `name`.

    root: the local data root (shared/data/raw); None reads from the hub / upstream URLs.
    on_malformed: "stop" raises SourceError at the first bad row (naming file and line);
    "skip" skips it and counts it in `malformed[name]`.
    revision: hub revision for sources read from the hub (None = "main").
    """
    if on_malformed not in ("stop", "skip"):
        raise ValueError(f"sources.on_malformed must be 'stop' or 'skip', got {on_malformed!r}")
    spec = _spec(name)

    def bad(file: str, line: int, why: str) -> None:
        if on_malformed == "stop":
            raise SourceError(f"{file}:{line}: malformed {name} row: {why}. Fix the file, or rerun with "
                              "sources.on_malformed=skip to skip (and count) such rows")
        if malformed is not None:
            malformed[name] = malformed.get(name, 0) + 1

    if root is not None:
        root = Path(root)
        for path in local_files(spec, root):
            rel = path.relative_to(root).as_posix()
            for line, rec in _iter_local_file(spec, path):
                why = _check(spec, rec)
                if why:
                    bad(rel, line, why)
                    continue
                yield Row(name, rel, line, rec)
    else:
        for file, line, rec in _iter_hub(spec, revision=revision):
            why = _check(spec, rec)
            if why:
                bad(file, line, why)
                continue
            yield Row(name, file, line, rec)


def _iter_hub(spec: SourceSpec, data_files_override: list | None = None,
              revision: str | None = None) -> Iterator[tuple[str, int, Any]]:
    """Rows from the Hugging Face hub (or the upstream raw URLs), mapped to the local layout."""
    import datasets  # heavy; only the hub path needs it

    to_local = spec.from_hub or (lambda r: r)
    if spec.urls or data_files_override:
        urls = list(data_files_override or spec.urls)
        for url in urls:
            builder = "csv" if url.endswith(".csv") else "json"
            ds = datasets.load_dataset(builder, data_files=url, split="train")
            for i, rec in enumerate(ds, 1):
                try:
                    yield url, i, to_local(dict(rec))
                except (KeyError, TypeError, ValueError) as e:
                    yield url, i, e
        return
    for split in spec.hub_splits:
        ds = datasets.load_dataset(spec.hub_id, spec.hub_config, data_dir=spec.hub_data_dir, split=split,
                                   revision=revision)
        label = f"hf://{spec.hub_id}" + (f"/{spec.hub_config}" if spec.hub_config else "") + f"[{split}]"
        for i, rec in enumerate(ds, 1):
            try:
                yield label, i, to_local(dict(rec))
            except (KeyError, TypeError, ValueError) as e:
                yield label, i, e


def source_origin(name: str, root: str | Path | None, revision: str | None = None) -> dict:
    """Where a source came from, for the manifest: local paths + sha256, or hub id / URLs."""
    spec = _spec(name)
    if root is not None:
        root = Path(root)
        files = {}
        for p in local_files(spec, root):
            files[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
        return {"kind": "local", "root": str(root), "files": files, "license": spec.license}
    if spec.urls:
        return {"kind": "url", "urls": list(spec.urls), "license": spec.license}
    return {"kind": "hub", "hub_id": spec.hub_id, "config": spec.hub_config, "data_dir": spec.hub_data_dir,
            "splits": list(spec.hub_splits), "revision": revision or "main (unpinned)", "license": spec.license}
