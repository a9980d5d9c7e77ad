"""Read a source row by row, from local files (sources.root) or the hub, with precise errors."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from automon.errors import UserError
from automon.sources.registry import SOURCES, SourceSpec


class SourceError(UserError, ValueError):
    """A missing, unreadable, changed or malformed source file or row; the message names file and line."""


ON_MALFORMED = ("stop", "skip")
SKIP_FIX = "fix the file, or rerun with sources.on_malformed=skip to skip (and count) such rows"
RESTORE_FIX = "restore it from its origin (shared/data/raw/SOURCES.md lists each file's source and commit)"


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
        raise SourceError(f"unknown source {name!r}", None, f"use one of: {', '.join(SOURCES)}") from None


def local_files(spec: SourceSpec, root: Path) -> list[Path]:
    files: list[Path] = []
    for pattern in spec.local:
        hits = sorted(root.glob(pattern))
        if not hits:
            raise SourceError(f"source {spec.name}: no file matches {pattern}", str(root / pattern),
                              "check sources.root (it should point at shared/data/raw), restore the file, or "
                              "set sources.root=null to read from the hub")
        files.extend(hits)
    return files


class _NotUtf8(ValueError):
    def __init__(self, e: UnicodeDecodeError):
        super().__init__(f"byte 0x{e.object[e.start]:02x} at column {e.start + 1} is not UTF-8")


def _records(spec: SourceSpec, path: Path, data: bytes) -> Iterator[tuple[int, Any]]:
    """(line or index, raw record) pairs of one file's bytes; the record is an Exception for a bad line.

    File-level problems (corrupt gzip, empty CSV, a JSON array that does not parse) raise SourceError.
    """
    if spec.fmt == "jsonl.gz":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:  # truncated / not gzip / corrupt deflate stream
            raise SourceError(f"truncated or corrupt gzip file ({e})", str(path), RESTORE_FIX) from e
    if spec.fmt in ("jsonl", "jsonl.gz"):
        # bytes.splitlines() breaks lines where text-mode reading does (\n, \r\n, \r), so line
        # numbers, which reach sample ids through Row.ref, are those the build has always used.
        for lineno, raw in enumerate(data.splitlines(), 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield lineno, _NotUtf8(e)
                continue
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                yield lineno, e
    elif spec.fmt == "json":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            raise SourceError(f"not UTF-8: {_NotUtf8(e)}", f"{path}:{line}", RESTORE_FIX) from e
        if not text.strip():
            raise SourceError("empty file", str(path), RESTORE_FIX)
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise SourceError(f"not valid JSON: {e.msg}", f"{path}:{e.lineno}", RESTORE_FIX) from e
        if not isinstance(records, list):
            raise SourceError(f"expected a JSON array of records, got {type(records).__name__}", str(path),
                              RESTORE_FIX)
        for i, rec in enumerate(records, 1):
            yield i, rec
    elif spec.fmt in ("csv", "csv_noheader"):
        # Decoded as Path.read_text did (universal newlines), so CSV line numbers stay what they were.
        try:
            text, not_utf8 = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig").read(), None
        except UnicodeDecodeError:
            # Keep going with the bad bytes escaped, so the rows holding them get a line number.
            text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="surrogateescape").read()
            not_utf8 = re.compile("[\udc80-\udcff]")
        reader = csv.reader(io.StringIO(text, newline=""))
        if spec.fmt == "csv_noheader":
            header = list(spec.csv_columns)
        else:
            header = next(reader, None)
            if header is None:
                raise SourceError("empty CSV file (no header row)", str(path), RESTORE_FIX)
        for row in reader:
            lineno = reader.line_num
            if not_utf8 is not None and not_utf8.search("".join(row)):
                yield lineno, ValueError("bytes that are not UTF-8")
                continue
            if len(row) != len(header):
                yield lineno, ValueError(f"expected {len(header)} columns, got {len(row)}")
                continue
            rec = dict(zip(header, row))
            if spec.fmt == "csv_noheader":
                rec["subject"] = path.stem.rsplit("_", 1)[0]
            yield lineno, rec
    else:  # pragma: no cover - registry is static
        raise SourceError(f"source {spec.name}: unknown format {spec.fmt}")


_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "dict": ("an object", lambda v: isinstance(v, dict)),
    "list[str]": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
}


class _Checks:
    """The per-row checks of one source, prepared once: every source row passes through them."""

    def __init__(self, spec: SourceSpec):
        self.spec = spec
        self.fields = []
        for k in spec.required:
            alts = spec.types.get(k, "str").split("|")
            preds = tuple(_TYPES[t][1] for t in alts)
            pred = preds[0] if len(preds) == 1 else (lambda v, ps=preds: any(p(v) for p in ps))
            self.fields.append((k, pred, " or ".join(_TYPES[t][0] for t in alts)))
        self.id_re = re.compile(spec.id_pattern) if spec.id_field else None

    def __call__(self, rec: Any) -> str | None:
        """None for a good record, else what is wrong with it."""
        if isinstance(rec, Exception):
            return f"unparseable: {rec}"
        if not isinstance(rec, dict):
            return f"expected an object, got {type(rec).__name__}"
        for k, pred, wanted in self.fields:
            v = rec.get(k)
            if v is None:
                return f"missing field(s) {[k for k, _, _ in self.fields if rec.get(k) is None]}"
            if not pred(v):
                return f"field {k!r} must be {wanted}, got {type(v).__name__} {repr(v)[:60]}"
        if self.id_re is not None:
            v = rec[self.spec.id_field]
            if not self.id_re.fullmatch(str(v)):
                return (f"{self.spec.id_field} {v!r} is not a {self.spec.name} id "
                        f"(ids have the form {self.spec.id_pattern})")
        return None


def read_source(name: str, root: str | Path | None, on_malformed: str = "stop",
                malformed: dict[str, int] | None = None, revision: str | None = None,
                on_file: Callable[[Path, str, str], None] | None = None) -> Iterator[Row]:
    """Yield the rows of source `name`.

    root: the local data root (shared/data/raw); None reads from the hub / upstream URLs.
    on_malformed: "stop" raises SourceError at the first bad row (naming file and line);
    "skip" skips it and counts it in `malformed[name]`. A row is bad when it does not parse, lacks
    a required field, has a field of the wrong type, or repeats or misshapes the source's id.
    revision: hub revision for sources read from the hub (None = "main").
    on_file(path, relative path, sha256): called for each local file after it is read and before
    it is parsed (checksum checks and the manifest use it: each file is read and hashed once).
    """
    if on_malformed not in ON_MALFORMED:
        raise SourceError(f"sources.on_malformed={on_malformed!r} is not a valid value", "sources.on_malformed",
                          f"use one of: {', '.join(ON_MALFORMED)}")
    spec = _spec(name)
    check = _Checks(spec)
    seen: dict[Any, str] = {}

    def ok(file: str, line: int, rec: Any) -> bool:
        why = check(rec)
        if why is None and spec.id_field:
            first = seen.setdefault(rec[spec.id_field], f"{file}:{line}")
            if first != f"{file}:{line}":
                why = f"duplicate {spec.id_field} {rec[spec.id_field]!r}, first at {first}"
        if why is None:
            return True
        if on_malformed == "stop":
            raise SourceError(f"malformed {name} row: {why}", f"{file}:{line}", SKIP_FIX)
        if malformed is not None:
            malformed[name] = malformed.get(name, 0) + 1
        return False

    if root is not None:
        root = Path(root)
        for path in local_files(spec, root):
            rel = path.relative_to(root).as_posix()
            try:
                data = path.read_bytes()
            except OSError as e:
                raise SourceError(f"cannot read source file: {e.strerror}", str(path),
                                  "check its permissions, or restore it") from e
            if on_file is not None:
                on_file(path, rel, hashlib.sha256(data).hexdigest())
            n = 0
            for line, rec in _records(spec, path, data):
                n += 1
                if ok(str(path), line, rec):
                    yield Row(name, rel, line, rec)
            if n == 0:
                raise SourceError(f"source {name}: the file has no rows", str(path), RESTORE_FIX)
    else:
        for file, line, rec in _iter_hub(spec, revision=revision):
            if ok(file, line, rec):
                yield Row(name, file, line, rec)


def _iter_hub(spec: SourceSpec, data_files_override: list | None = None,
              revision: str | None = None) -> Iterator[tuple[str, int, Any]]:
    """Rows from the Hugging Face hub (or the upstream raw URLs), mapped to the local layout."""
    import datasets  # heavy; only the hub path needs it

    to_local = spec.from_hub or (lambda r: r)

    def load(where: str, *args, **kwargs):
        try:
            return datasets.load_dataset(*args, **kwargs)
        except Exception as e:  # network, offline mode, auth, missing revision: all end the same way
            raise SourceError(f"cannot load source {spec.name} from the hub: {type(e).__name__}: {e}", where,
                              "check the network (HF_HUB_OFFLINE?) and sources.revisions, or set sources.root "
                              "to a local copy (shared/data/raw)") from e

    if spec.urls or data_files_override:
        urls = list(data_files_override or spec.urls)
        for url in urls:
            builder = "csv" if url.endswith(".csv") else "json"
            ds = load(url, builder, data_files=url, split="train")
            for i, rec in enumerate(ds, 1):
                try:
                    yield url, i, to_local(dict(rec))
                except (KeyError, TypeError, ValueError) as e:
                    yield url, i, e
        return
    for split in spec.hub_splits:
        label = f"hf://{spec.hub_id}" + (f"/{spec.hub_config}" if spec.hub_config else "") + f"[{split}]"
        ds = load(label, spec.hub_id, spec.hub_config, data_dir=spec.hub_data_dir, split=split, revision=revision)
        for i, rec in enumerate(ds, 1):
            try:
                yield label, i, to_local(dict(rec))
            except (KeyError, TypeError, ValueError) as e:
                yield label, i, e


def source_origin(name: str, root: str | Path | None, revision: str | None = None,
                  digests: dict[str, str] | None = None) -> dict:
    """Where a source came from, for the manifest: local paths + sha256, or hub id / URLs.

    digests: sha256 by relative path of files already hashed while reading (see read_source's
    on_file), so the manifest does not read them a second time.
    """
    spec = _spec(name)
    if root is not None:
        root = Path(root)
        files = {}
        for p in local_files(spec, root):
            rel = p.relative_to(root).as_posix()
            files[rel] = (digests or {}).get(rel) or hashlib.sha256(p.read_bytes()).hexdigest()
        return {"kind": "local", "root": str(root), "files": files, "license": spec.license}
    if spec.urls:
        return {"kind": "url", "urls": list(spec.urls), "license": spec.license}
    return {"kind": "hub", "hub_id": spec.hub_id, "config": spec.hub_config, "data_dir": spec.hub_data_dir,
            "splits": list(spec.hub_splits), "revision": revision or "main (unpinned)", "license": spec.license}
