"""Reading and atomically writing build directories (test.jsonl, train.jsonl, manifest.json)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from automon.schema import Sample, read_samples

BUILD_FORMAT = "automon-build-v1"
BUILD_COMMAND = "python data_build/build.py sources.root=../shared/data/raw out={out}"


class BuildNotFound(FileNotFoundError):
    pass


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def json_dumps_stable(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@contextmanager
def atomic_dir(out: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temp dir beside `out`; on success it replaces `out` in one rename, else vanishes.

    Readers therefore see the previous complete build or the new complete build, never half.
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass overwrite=true to replace it, or choose another out=")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / "d")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_jsonl(path: Path, samples: list[Sample]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for s in samples:
            f.write(s.to_json())
            f.write("\n")


@dataclass
class Build:
    """A loaded build. `manifest_hash` identifies its exact bytes (sha256 of manifest.json)."""
    path: Path
    manifest: dict
    manifest_hash: str

    def samples(self, split: str) -> list[Sample]:
        return read_samples(self.path / f"{split}.jsonl")


def load_build(path: str | os.PathLike) -> Build:
    p = Path(path)
    mf = p / "manifest.json"
    if not mf.exists():
        raise BuildNotFound(f"no data build at {p} (missing manifest.json). Build one with:\n  "
                            + BUILD_COMMAND.format(out=p))
    manifest = json.loads(mf.read_text())
    if manifest.get("format") != BUILD_FORMAT:
        raise BuildNotFound(f"{mf} has format {manifest.get('format')!r}, expected {BUILD_FORMAT!r}; rebuild it")
    for split in ("train", "test"):
        if not (p / f"{split}.jsonl").exists():
            raise BuildNotFound(f"{p} has a manifest but no {split}.jsonl; rebuild it")
    return Build(path=p, manifest=manifest, manifest_hash=sha256_file(mf))


def write_build(out: Path, train: list[Sample], test: list[Sample], manifest: dict,
                overwrite: bool = False, extra_files: dict[str, str] | None = None,
                before_commit: Callable[[Path], None] | None = None) -> dict:
    """Write a complete build atomically. Fills in format, file hashes and counts in `manifest`.

    `before_commit(tmp_dir)` runs on the finished files before they become visible at `out`;
    if it raises, nothing is published.
    """
    manifest = dict(manifest)
    manifest["format"] = BUILD_FORMAT
    with atomic_dir(out, overwrite=overwrite) as tmp:
        files = {}
        for split, samples in (("test", test), ("train", train)):
            for s in samples:
                if s.split != split:
                    raise ValueError(f"sample {s.id} has split {s.split!r} but is being written to {split}")
            write_jsonl(tmp / f"{split}.jsonl", samples)
            files[f"{split}.jsonl"] = sha256_file(tmp / f"{split}.jsonl")
        manifest["files"] = files
        manifest["counts"] = count_samples(train + test)
        (tmp / "manifest.json").write_text(json_dumps_stable(manifest), encoding="utf-8")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text if not callable(text) else text(manifest), encoding="utf-8")
        if before_commit is not None:
            before_commit(tmp)
    return manifest


def count_samples(samples: list[Sample]) -> dict:
    """counts[split][subset][label] as strings-keyed nested dict (stable JSON)."""
    out: dict = {}
    for s in samples:
        d = out.setdefault(s.split, {}).setdefault(s.subset, {"0": 0, "1": 0})
        d[str(s.label)] += 1
    return out
