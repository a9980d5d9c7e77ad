"""Reading and atomically writing build directories (test.jsonl, train.jsonl, manifest.json)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from automon.controls import control_kind
from automon.errors import UserError
# ensure_writable_dir and resolved live below every stage (automon.outdir); importers of them here keep working
from automon.outdir import OutDirError, ensure_writable_dir, make_dirs, remove_dirs, resolved
from automon.release import retired_message
from automon.schema import Sample, SampleError, read_samples

BUILD_FORMAT = "automon-build-v1"
BUILD_COMMAND = "python data_build/build.py sources.root=../shared/data/raw out={out}"


class BuildNotFound(UserError, FileNotFoundError):
    """No complete data build where one was expected; the message gives the command that makes one."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class BuildChanged(UserError):
    """A build's file differs from the sha256 its manifest.json records (edited or cut after the build)."""


# (resolved path, size, mtime_ns) -> sha256: a file is hashed once per process while it is unchanged
# (train.jsonl of the real build is ~180 MB, 1-3 s to hash; the pipeline loads a build several times).
_VERIFIED: dict[tuple[str, int, int], str] = {}


def sha256_memo(path: Path) -> str:
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_file(path)
    return _VERIFIED[key]


def json_dumps_stable(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _leftovers(out: Path) -> list[Path]:
    """Temp dirs of earlier builds of `out` (hidden, beside it)."""
    if not out.parent.is_dir():
        return []
    return sorted(p for pattern in (f".{out.name}.tmp-*", f".{out.name}.old-*") for p in out.parent.glob(pattern))


def _lock(d: Path) -> int:
    """Hold an exclusive lock on dir `d` while this process lives (the kernel drops it on any exit)."""
    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


# How long a held lock may take to be let go before its writer counts as running. A SIGKILLed
# build's forked children hold its lock too (a fork inherits it) and die a moment after it does
# (PR_SET_PDEATHSIG): a rerun at once must not take them for a live build.
LEFTOVER_GRACE_S = 2.0


def lock_leftover(d: Path, busy: UserError) -> int | None:
    """Lock temp dir `d` left beside an output: its fd, or None when it vanished meanwhile; raises
    `busy` when a live process still holds it after LEFTOVER_GRACE_S (its writer is running)."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while True:
        try:
            return _lock(d)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise busy from None
            time.sleep(0.02)
        except FileNotFoundError:
            return None


def clean_leftovers(out: Path) -> list[Path]:
    """Remove what killed builds of `out` left beside it; returns what was removed.

    A running build holds a lock on its temp dir; an unlocked one belongs to a build that died. If a
    build died between moving the old `out` aside and moving the new one in, the old one is put back.
    """
    removed = []
    for d in _leftovers(out):
        fd = lock_leftover(d, OutDirError(f"another build is writing {out} right now", str(d),
                                          "wait for it to finish, or choose another out="))
        if fd is None:
            continue  # its build just finished and removed it
        try:
            if d.name.startswith(f".{out.name}.old-") and (d / "d").is_dir() and not out.exists():
                os.replace(d / "d", out)
            shutil.rmtree(d)
            removed.append(d)
        except OSError as e:
            raise OutDirError(f"cannot remove {d}, left by a killed build of {out}: {e.strerror}", e.filename,
                              "remove it by hand") from e
        finally:
            os.close(fd)
    return removed


@contextmanager
def atomic_dir(out: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temp dir beside `out`; on success it replaces `out` in one rename, else vanishes.

    Readers therefore see the previous complete build or the new complete build, never half. Enter
    it before any work: it checks that `out` can be written, and removes what killed builds of
    `out` left behind. Directories follow the umask (mkdtemp alone would make them drwx------).
    """
    out = Path(out)
    resolved(out, "out")  # a symlink loop: now, not after the whole build
    clean_leftovers(out)
    if out.exists() and not overwrite:
        raise OutDirError(f"{out} already exists", None, "pass overwrite=true to replace it, or choose another out=")
    if out.exists() and not out.is_dir():
        raise OutDirError(f"{out} exists and is not a directory", None, "choose another out=")
    fix = "choose an out= in a directory you can write to"
    try:
        created = make_dirs(out.parent)
    except OSError as e:
        raise OutDirError(f"cannot create the directory for out={out}: {e.strerror}", e.filename, fix) from e
    # Every directory this call makes is named here BEFORE it exists (_new_hidden_dir), and one try
    # covers everything from its making to its removal: a SIGTERM (SystemExit) at any bytecode leaves
    # nothing behind. With mkdtemp, a SIGTERM between its mkdir and its return left the temp dir (seen
    # under load: test_sigterm_cleans_up_at_once).
    tmps: list[Path] = []
    olds: list[Path] = []
    fd = None
    published = False
    try:
        try:
            mode = 0o777 & ~_umask()
            for _ in range(3):
                tmp = _new_hidden_dir(out.parent, f".{out.name}.tmp-", tmps)
                try:
                    fd = _lock(tmp)
                    break
                except FileNotFoundError:  # a concurrent cleaner took it before we locked it
                    continue
            else:  # pragma: no cover - needs three lost races in a row
                raise OutDirError(f"could not claim a temp dir beside {out}", str(out.parent), "rerun the build")
        except OSError as e:  # not writable, not a directory, read-only file system, no space...
            raise OutDirError(f"cannot write in {out.parent}: {e.strerror}", f"out={out}", fix) from e
        os.chmod(tmp, mode)
        yield tmp
        if out.exists():
            old = _new_hidden_dir(out.parent, f".{out.name}.old-", olds)
            old_fd = _lock(old)  # a concurrent clean_leftovers must not take it for a dead build's
            try:
                os.replace(out, old / "d")
                os.replace(tmp, out)
            finally:
                os.close(old_fd)
        else:
            os.replace(tmp, out)
        published = True
    finally:
        if fd is not None:
            os.close(fd)
        for d in olds:  # stopped in the middle of the swap: the previous build goes back at once
            if (d / "d").is_dir() and not out.exists():
                os.replace(d / "d", out)
            shutil.rmtree(d, ignore_errors=True)
        for d in tmps:
            shutil.rmtree(d, ignore_errors=True)
        if not published:
            remove_dirs(created)


def _new_hidden_dir(parent: Path, prefix: str, made: list[Path]) -> Path:
    """A new directory `parent/<prefix><random>` (mode 0700, as mkdtemp makes it), appended to `made`
    before it is created, so that the caller's cleanup knows it whenever a signal comes."""
    for _ in range(100):
        d = parent / f"{prefix}{secrets.token_hex(6)}"
        made.append(d)
        try:
            os.mkdir(d, 0o700)
            return d
        except FileExistsError:  # another's: not ours to remove
            made.pop()
    raise FileExistsError(errno.EEXIST, "no free temp dir name", str(parent))  # pragma: no cover


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

    def verify(self, split: str) -> None:
        """Fail unless `<split>.jsonl` has the sha256 its manifest records: a sample edited, added or cut
        after the build (a flipped label, a truncated line) is never trained or evaluated on silently."""
        name = f"{split}.jsonl"
        f = self.path / name
        rebuild = f"{rebuild_hint(self.manifest, self.path)}, or restore the file"
        listed = self.manifest.get("files", {}).get(name)
        if not listed:
            raise BuildChanged(f"{self.path / 'manifest.json'} records no sha256 for {name}", str(f), rebuild)
        actual = sha256_memo(f)
        if actual != listed:
            raise BuildChanged(f"{name} was changed after the build: its sha256 {actual[:12]}... differs from "
                               f"{listed[:12]}... in manifest.json", str(f), rebuild)

    def samples(self, split: str) -> list[Sample]:
        self.verify(split)
        samples = read_samples(self.path / f"{split}.jsonl", split)
        if split == "test":
            check_pairs(samples, self.path / "test.jsonl", rebuild_hint(self.manifest, self.path))
        return samples


def check_pairs(samples: list[Sample], path: Path, fix: str) -> None:
    """The test split is scored as twin pairs: each pair_id holds exactly one benign (0) and one
    misbehaving (1) sample of one subset, answering the same request. A pair with two 1s, or twins
    whose requests differ (a manifest updated after the edit), was scored as a pair. A contrast control
    (automon.controls) is benign, has a pair_id of its own and is grouped (meta.group) with a pair of its
    subset and source item."""

    pairs: dict[str, list[tuple[int, Sample]]] = {}
    controls: list[tuple[int, Sample]] = []
    for i, s in enumerate(samples, 1):
        if control_kind(s.meta) is not None:
            controls.append((i, s))
        else:
            pairs.setdefault(str(s.pair_id), []).append((i, s))
    for line, c in controls:  # a contrast control (wordings v9): benign, beside the pair of its source item
        pair = pairs.get(str(c.meta.get("group")))
        bad = ("it is not benign" if c.label != 0 else "its group names no pair of this file" if pair is None
               else "its group is a pair of another subset or source" if
               (pair[0][1].subset, pair[0][1].source) != (c.subset, c.source)
               else "its pair_id is another sample's" if str(c.pair_id) in pairs else None)
        if bad:
            raise SampleError(f"not a contrast control: sample {c.id} ({c.meta['control']}): {bad}", f"{path}:{line}",
                              f"the file is not as data_build/build.py wrote it: {fix}")
    for pid, members in pairs.items():
        labels = sorted(s.label for _, s in members)
        subsets = {s.subset for _, s in members}
        if labels != [0, 1] or len(subsets) != 1:
            line = members[-1][0]
            what = (f"{len(members)} sample(s) with labels {labels}" if labels != [0, 1]
                    else f"samples of subsets {sorted(subsets)}")
            raise SampleError(f"not a twin pair: pair_id {pid!r} has {what} (ids "
                              f"{', '.join(s.id for _, s in members)}); each test pair is one benign (0) and one "
                              f"misbehaving (1) sample of one subset", f"{path}:{line}",
                              f"the file is not as data_build/build.py wrote it: {fix}")
        (_, a), (line, b) = members
        if a.request != b.request:
            at = len(os.path.commonprefix([a.request, b.request]))
            raise SampleError(f"not a twin pair: pair_id {pid!r} has two requests (ids {a.id}, {b.id}: they "
                              f"differ from character {at}); each test pair answers one request twice, once "
                              f"benign (0) and once misbehaving (1)", f"{path}:{line}",
                              f"the file is not as data_build/build.py wrote it: {fix}")


def _sources(manifest: dict, out: str | os.PathLike) -> dict | None:
    sources = ((manifest.get("config") or {}) if isinstance(manifest.get("config"), dict) else {}).get("sources")
    if not (isinstance(sources, dict) and "root" in sources):  # since build-v2 the build record holds it
        sources = _build_log_sources(out) or sources
    return sources if isinstance(sources, dict) else None


def sources_root(out: str | os.PathLike) -> Path | None:
    """The source directory the build at `out` was made from, where it still is (None: the hub, or a
    directory that is gone or was relative to another working directory)."""
    try:
        manifest = json.loads((Path(out) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    root = (_sources(manifest, out) or {}).get("root") if isinstance(manifest, dict) else None
    return Path(root) if root and Path(root).is_dir() else None


def rebuild_hint(manifest: dict, out: str | os.PathLike) -> str:
    """How to remake the build at `out`, from how its manifest says it was made: a synthetic source
    tree is not ../shared/data/raw, and a hub build has no sources.root."""
    sources = _sources(manifest, out)
    root = sources.get("root") if isinstance(sources, dict) else None
    if manifest.get("synthetic_sources"):
        where = f" at {root}" if root else ""
        return (f"rebuild it the way it was made: its sources are automon's synthetic ones{where}, not "
                f"../shared/data/raw (pipeline.py with the same experiment= rebuilds it; or python "
                f"data_build/build.py sources.root={root or '<the synthetic dir>'} out={out} with the settings "
                f"in its manifest.json config)")
    if isinstance(sources, dict) and "root" in sources:
        src = f"sources.root={root} " if root else ""
        return (f"rebuild it: python data_build/build.py {src}out={out} (with the settings in its manifest.json "
                f"config)")
    return f"rebuild it ({BUILD_COMMAND.format(out=out)})"


def _build_log_sources(out: str | os.PathLike) -> dict | None:
    """The sources config keys (root, checksums) that build_log.json's build record holds, if any."""
    try:
        record = json.loads((Path(out) / "build_log.json").read_text(encoding="utf-8"))["build"]
        sources = record["config"]["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sources if isinstance(sources, dict) else None


def _check_manifest_shape(manifest: object, mf: Path, fix: str) -> dict:
    """A manifest.json that parses but is not a build's (a list, files that are not name -> sha256, ...)."""
    problem = None
    if not isinstance(manifest, dict):
        problem = f"is a JSON {type(manifest).__name__}, not an object"
    elif manifest.get("format") != BUILD_FORMAT:
        problem = f"has format {manifest.get('format')!r}, expected {BUILD_FORMAT!r}"
    elif not isinstance(manifest.get("files"), dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in manifest["files"].items()):
        problem = "has no 'files' mapping of file name -> sha256"
    elif "counts" in manifest and not isinstance(manifest["counts"], dict):
        problem = "has 'counts' that is not an object"
    if problem:
        raise BuildNotFound(f"{mf} {problem}: not a manifest written by data_build/build.py", str(mf), fix)
    return manifest  # type: ignore[return-value]


def load_build(path: str | os.PathLike, verify: tuple[str, ...] = ()) -> Build:
    """The build at `path`; the files of the splits in `verify` are checked against its manifest now
    (before any expensive work), the others when `Build.samples` first reads them."""
    p = Path(path)
    mf = p / "manifest.json"
    if not mf.exists():
        raise BuildNotFound(f"no data build at {p} (missing manifest.json). Build one with:\n  "
                            + BUILD_COMMAND.format(out=p))
    fix = f"rebuild it: {BUILD_COMMAND.format(out=p)}"
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BuildNotFound(f"{mf} is not valid JSON ({e})", str(mf), fix) from None
    except OSError as e:  # a directory named manifest.json, no permission to read it
        raise BuildNotFound(f"{mf} cannot be read ({e.strerror})", str(mf), fix) from None
    manifest = _check_manifest_shape(manifest, mf, fix)
    retired = retired_message(str(((manifest.get("config") or {}).get("wordings") or {}).get("version")))
    if retired:
        raise BuildNotFound(f"{p} is a build of {retired}", str(p),
                            f"or rebuild it with this code: {BUILD_COMMAND.format(out=p)}")
    for split in ("train", "test"):
        if (p / f"{split}.jsonl").is_dir():
            raise BuildNotFound(f"{p / f'{split}.jsonl'} is a directory", str(p), rebuild_hint(manifest, p))
        if not (p / f"{split}.jsonl").exists():
            raise BuildNotFound(f"{p} has a manifest but no {split}.jsonl", str(p), rebuild_hint(manifest, p))
    build = Build(path=p, manifest=manifest, manifest_hash=sha256_file(mf))
    for split in verify:
        build.verify(split)
    return build


def write_build(out: Path, train: list[Sample], test: list[Sample], manifest: dict,
                overwrite: bool = False, extra_files: dict[str, str] | None = None,
                before_commit: Callable[[Path], None] | None = None) -> dict:
    """Write a complete build atomically. Fills in format, file hashes and counts in `manifest`.

    `before_commit(tmp_dir)` runs on the finished files before they become visible at `out`;
    if it raises, nothing is published.
    """
    with atomic_dir(out, overwrite=overwrite) as tmp:
        manifest = write_build_files(tmp, train, test, manifest, extra_files)
        if before_commit is not None:
            before_commit(tmp)
    return manifest


def write_build_files(d: Path, train: list[Sample], test: list[Sample], manifest: dict,
                      extra_files: dict[str, str] | None = None) -> dict:
    """The build's files in directory `d` (a temp dir of atomic_dir); returns the full manifest."""
    return write_manifest_files(d, manifest, write_sample_files(d, train, test), train + test, extra_files)


def write_sample_files(d: Path, train: list[Sample], test: list[Sample]) -> dict[str, str]:
    """test.jsonl and train.jsonl in `d`; returns file name -> sha256."""
    files = {}
    for split, samples in (("test", test), ("train", train)):
        for s in samples:
            if s.split != split:
                raise ValueError(f"sample {s.id} has split {s.split!r} but is being written to {split}")
        write_jsonl(d / f"{split}.jsonl", samples)
        files[f"{split}.jsonl"] = sha256_file(d / f"{split}.jsonl")
    return files


def write_manifest_files(d: Path, manifest: dict, files: dict[str, str], samples: list[Sample],
                         extra_files: dict[str, str] | None = None) -> dict:
    """manifest.json (with format, the sample files' hashes and the counts of `samples`) and the extra
    files (text, or a function of the full manifest) in `d`; returns the full manifest."""
    manifest = dict(manifest)
    manifest["format"] = BUILD_FORMAT
    manifest["files"] = files
    manifest["counts"] = count_samples(samples)
    (d / "manifest.json").write_text(json_dumps_stable(manifest), encoding="utf-8")
    for name, text in (extra_files or {}).items():
        (d / name).write_text(text if not callable(text) else text(manifest), encoding="utf-8")
    return manifest


def count_samples(samples: list[Sample]) -> dict:
    """counts[split][subset][label] as strings-keyed nested dict (stable JSON)."""
    out: dict = {}
    for s in samples:
        d = out.setdefault(s.split, {}).setdefault(s.subset, {"0": 0, "1": 0})
        d[str(s.label)] += 1
    return out
