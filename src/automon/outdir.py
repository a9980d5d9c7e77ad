"""Output directories every stage writes: `ensure_writable_dir` (fail at start-up, not after the
work, when a configured directory cannot be written) and `resolved` (a symlink loop is one error line).

Below every package that writes (the build, training, evaluation, the config checks), so that none of
them imports another for it.
"""

from __future__ import annotations

import errno
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


# Written into every directory publish() makes: a directory holding it is automon's to replace; any other
# non-empty directory is the user's and is never touched.
PUBLISHED_MARKER = ".automon-published"


class PublishError(UserError):
    """eval.publish names a place publishing would destroy something it did not write."""


def check_publish_dest(dest: Path, sources: Iterable[Path] = ()) -> None:
    """Refuse (PublishError) a publish destination that is a file, a non-empty directory an earlier publish
    did not write (no PUBLISHED_MARKER: a user's notes, a committed study, docs/results), or one that is,
    holds or lies inside a directory the results are read from (an evaluation's own output dir: replacing
    it would delete its identity, cache and monitors). Called at start-up and again before replacing."""
    dest = Path(dest).resolve()
    if dest.exists() and not dest.is_dir():
        raise PublishError(f"eval.publish={dest} is a file", "eval.publish", "name a new or empty directory")
    for src in sources:
        src = Path(src).resolve()
        if dest == src or src in dest.parents or dest in src.parents:
            raise PublishError(f"eval.publish={dest} overlaps {src}, which the published results are read from",
                               "eval.publish", "publish to a directory of its own, outside every evaluation's output")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / PUBLISHED_MARKER).is_file():
        raise PublishError(f"eval.publish={dest} holds files that eval.publish did not write (no {PUBLISHED_MARKER})",
                           "eval.publish", "publishing replaces its directory: name a new or empty one")
