"""Output directories every stage writes: `ensure_writable_dir` (fail at start-up, not after the
work, when a configured directory cannot be written) and `resolved` (a symlink loop is one error line).

Below every package that writes (the build, training, evaluation, the config checks), so that none of
them imports another for it.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

from automon.errors import UserError


class OutDirError(UserError):
    """The output directory cannot be created, replaced or written."""


def resolved(path: str | os.PathLike, key: str) -> Path:
    """`path` resolved; a symlink loop on the way is the user's to fix (Path.resolve raises RuntimeError,
    and exists() calls such a path missing, so a stage noticed only when it finally wrote there)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as e:
        raise OutDirError(f"{key}={path} is, or lies under, a symlink loop ({e})", str(path),
                          f"fix or remove the symlinks, or choose another {key}=") from None


def make_dirs(path: Path) -> list[Path]:
    """mkdir -p that returns the directories it created (outermost first). Safe against a concurrent
    mkdir of the same directories (another stage creating the same parent): only what this call
    created is returned. On an error, what it had created is removed again."""
    missing = []
    p = path
    while not p.exists():
        if p.is_symlink():  # a dangling link or a symlink loop: exists() is False, mkdir would fail late
            os.stat(p)  # raises the OSError (ELOOP, ENOENT) that names it
        missing.append(p)
        p = p.parent
    created: list[Path] = []
    try:
        for d in reversed(missing):
            try:
                d.mkdir(mode=0o777)
            except FileExistsError:
                if not d.is_dir():
                    if not os.path.lexists(d):  # another process made it and removed it again meanwhile
                        raise FileNotFoundError(errno.ENOENT, "made and removed again meanwhile", str(d)) from None
                    raise
                continue  # another process made it meanwhile: not ours to remove again
            created.append(d)
    except OSError:
        remove_dirs(created)  # a failure half-way leaves nothing of ours behind
        raise
    return created


def ensure_writable_dir(path: str | os.PathLike, key: str) -> Path:
    """Fail now, not after a stage's work, when config key `key` names a directory that cannot be
    created or written in. Leaves nothing behind: directories it had to create are removed again."""
    d = Path(path)
    resolved(d, key)
    fix = f"set {key}= to a directory you can write in"
    attempts = 50  # each lost race means another check finished meanwhile: they end, so do the retries
    for attempt in range(attempts):
        created: list[Path] = []
        try:
            created = make_dirs(d)
            fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=d)
            os.close(fd)
            os.unlink(probe)
            return d
        except FileNotFoundError as e:  # a concurrent check removed a parent it had made: try again
            if attempt == attempts - 1:
                raise OutDirError(f"cannot write in {key}={d}: {e.strerror}", e.filename or str(d), fix) from None
        except OSError as e:
            raise OutDirError(f"cannot write in {key}={d}: {e.strerror}", e.filename or str(d), fix) from None
        finally:
            remove_dirs(created)
    return d


def remove_dirs(created: list[Path]) -> None:
    """Remove the (still empty) parent directories a failed build created."""
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            break


# An evaluation's output set lists its files here (automon.evaluation.publish): a rerun that writes fewer
# (no stress= this time, a sweep of fewer runs) removes the rest, and eval.publish copies only these.
OUTPUT_SET = ".automon-outputs.json"


def output_files(out_dir: Path) -> set[str] | None:
    """The files (relative paths) of the output set in `out_dir`, None where it lists none (results from
    before output sets were listed)."""
    try:
        doc = json.loads((Path(out_dir) / OUTPUT_SET).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = doc.get("files") if isinstance(doc, dict) else None
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else None


# Written into every directory publish() makes, listing the files it wrote there: a directory holding it is
# automon's to publish into, and the next publish replaces the files listed, no other; any other non-empty
# directory is the user's and is never touched, and a file the list does not name (a README written beside
# the results, a note added since) stays as it is.
PUBLISHED_MARKER = ".automon-published"


class PublishError(UserError):
    """eval.publish names a place publishing would destroy something it did not write."""


def files_under(d: Path) -> list[str]:
    """Every file under `d`, as sorted relative paths."""
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() or p.is_symlink())


def published_files(dest: Path) -> set[str] | None:
    """The files an earlier publish wrote in `dest` (its marker's list), None without a marker. A marker
    that lists nothing readable (an older publish's plain-text one) lists no file: what is there is then
    the user's as far as anyone can tell, and stays."""
    try:
        doc = json.loads((dest / PUBLISHED_MARKER).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return set()
    files = doc.get("files") if isinstance(doc, dict) else None
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def write_published_marker(d: Path) -> None:
    """Mark `d` as publish's, listing every file in it (the next publish replaces those and no other)."""
    _write_marker(d, set(files_under(d)))


def check_publish_dest(dest: Path, sources: Iterable[Path] = ()) -> None:
    """Refuse (PublishError) a publish destination that is a file, a non-empty directory an earlier publish
    did not write (no PUBLISHED_MARKER: a user's notes, a committed study, docs/results), or one that is,
    holds or lies inside a directory the results are read from (an evaluation's own output dir: replacing
    it would delete its identity, cache and monitors). Called at start-up and again before publishing."""
    key = "eval.publish"
    dest = resolved(dest, key)
    if dest.exists() and not dest.is_dir():
        raise PublishError(f"{key}={dest} is a file", key, "name a new or empty directory")
    for src in sources:
        src = resolved(src, key)
        if dest == src or src in dest.parents or dest in src.parents:
            raise PublishError(f"{key}={dest} overlaps {src}, which the published results are read from",
                               key, "publish to a directory of its own, outside every evaluation's output")
    if dest.is_dir() and any(dest.iterdir()) and published_files(dest) is None:
        raise PublishError(f"{key}={dest} holds files that eval.publish did not write (no {PUBLISHED_MARKER})",
                           key, "publishing writes only into a new or empty directory or one of its own: name one")


def replace_published(new: Path, dest: Path) -> None:
    """Move the files under `new` into `dest` in place of what an earlier publish wrote there (the files its
    marker lists), leaving every other file as it is; PublishError, before anything changes, when a new
    file would replace one no publish wrote. The marker lists both sets until the old files are gone (a
    kill half-way leaves them known to the next publish), then the new set."""
    dest.mkdir(parents=True, exist_ok=True)
    earlier = published_files(dest) or set()
    incoming = set(files_under(new))
    clash = sorted(f for f in incoming if f not in earlier and (dest / f).exists())
    if clash:
        raise PublishError(f"eval.publish={dest} holds files that no earlier publish wrote where this one writes: "
                           f"{', '.join(clash[:6])}", "eval.publish",
                           "move them elsewhere (or name another directory) and rerun the same command")
    _write_marker(dest, earlier | incoming)
    remove_files(dest, earlier - incoming)
    for rel in sorted(incoming):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(new / rel, dest / rel)
    _write_marker(dest, incoming)


def remove_files(root: Path, rels: Iterable[str]) -> None:
    """Remove the files at `rels` (paths relative to `root`) and the directories under `root` that leaves
    empty: an earlier output set's files that a new set lacks."""
    for rel in sorted(rels):
        p = root / rel
        p.unlink(missing_ok=True)
        for d in p.parents:
            if d == root or root not in d.parents:
                break
            try:
                d.rmdir()
            except OSError:
                break


def _write_marker(d: Path, files: set[str]) -> None:
    doc = {"written_by": "automon's eval.publish: the next publish replaces the files listed here, no other",
           "files": sorted(files - {PUBLISHED_MARKER})}
    tmp = d / f"{PUBLISHED_MARKER}.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, d / PUBLISHED_MARKER)
