"""An evaluation's output set (config.yaml, predictions, metrics, report, figures, identity.json)
appears in output_dir whole or not at all.

Everything is written first into a hidden staging dir beside output_dir (`.<name>.staging-*`, the
same file system); only when every file is there do renames move them in, identity.json last.
A failure while writing (a full disk, a plot that raises) removes the staging dir and leaves the
earlier results in output_dir as they were; renames need no space. Until identity.json is back the
output set is not current (automon.evaluation.status), so a kill between the renames reruns, never
passes off a mix as finished. The prediction cache (output_dir/cache by default) is never staged:
it is appended to as predictions come in.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from automon.data.io import _lock, lock_leftover
from automon.errors import disk_full
from automon.evaluation.errors import EvalError
from automon.evaluation.identity import IDENTITY_FILE


def _clean_leftovers(out_dir: Path) -> None:
    """Remove staging dirs of killed evaluations of `out_dir` (a running one holds a lock on its own)."""
    for d in sorted(out_dir.parent.glob(f".{out_dir.name}.staging-*")):
        fd = lock_leftover(d, EvalError(f"another evaluation is writing {out_dir} right now", str(d),
                                        "wait for it to finish, or choose another output_dir="))
        if fd is None:
            continue
        try:
            shutil.rmtree(d, ignore_errors=True)
        finally:
            os.close(fd)


def publish(stage: Path, out_dir: Path) -> None:
    """Move every file of `stage` to the same place under `out_dir`: identity.json is removed first and
    moved in last, so the set is current only once it is whole."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / IDENTITY_FILE).unlink(missing_ok=True)
    files = sorted(p for p in stage.rglob("*") if p.is_file() or p.is_symlink())
    files.sort(key=lambda p: p.relative_to(stage).as_posix() == IDENTITY_FILE)  # identity.json last
    for src in files:
        dst = out_dir / src.relative_to(stage)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)


@contextmanager
def staged_outputs(out_dir: Path) -> Iterator[Path]:
    """Yield a staging dir for the whole output set; on success publish it into `out_dir`. A full disk
    becomes one EvalError line saying the earlier results are untouched."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(out_dir)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.staging-", dir=out_dir.parent))
    fd = _lock(stage)
    try:
        yield stage
        publish(stage, out_dir)
    except OSError as e:
        if not disk_full(e):
            raise
        raise EvalError(f"cannot write the evaluation's outputs: {e.strerror}", e.filename or str(stage),
                        f"free some space (or quota) there and rerun the same command (predictions are cached); "
                        f"the earlier results in {out_dir}, if any, are unchanged") from e
    finally:
        os.close(fd)
        shutil.rmtree(stage, ignore_errors=True)
