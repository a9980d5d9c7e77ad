"""An evaluation's output set (config.yaml, predictions, metrics, report, figures, identity.json)
appears in output_dir whole or not at all.

Everything is written first into a hidden staging dir beside output_dir (`.<name>.staging-*`, the
same file system); only when every file is there do renames move them in, identity.json last.
A failure while writing (a full disk, a plot that raises) removes the staging dir and leaves the
earlier results in output_dir as they were; renames need no space. Until identity.json is back the
output set is not current (automon.evaluation.status), so a kill between the renames reruns, never
passes off a mix as finished. The prediction cache (output_dir/cache by default) is never staged:
it is appended to as predictions come in.

output_dir is an evaluation's own or empty (`refuse_foreign_output`, before the model loads): never
the data build, a training run's directory, or a folder of other files (a paper's report.md and
metrics.json would be replaced).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from automon.data.io import _lock, lock_leftover, resolved
from automon.errors import disk_full
from automon.evaluation.errors import EvalError
from automon.evaluation.identity import IDENTITY_FILE, IDENTITY_FORMAT
from automon.outdir import OUTPUT_SET, output_files, remove_files
from automon.training.rundir import is_run_dir

METRICS_FILE = "metrics.json"
# What may sit in an output_dir before its first output set is published: the prediction cache
# (appended to while scoring), the pipeline's record and logs (pipeline.py's state_dir), wandb's files.
BEFORE_PUBLISH = ("cache", "pipeline", "wandb")


def is_evaluation_dir(out_dir: Path) -> bool:
    """Whether eval/holdout.py published outputs in `out_dir`: its identity record, or (a kill between
    the renames, or results from before identity records) a metrics.json that carries metrics_version."""
    for name, key, want in ((IDENTITY_FILE, "format", IDENTITY_FORMAT), (METRICS_FILE, "metrics_version", None)):
        try:
            doc = json.loads((out_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and key in doc and (want is None or doc[key] == want):
            return True
    return False


def _before_publish(p: Path) -> bool:
    """An entry an evaluation (or the pipeline around it) writes before its first outputs appear."""
    if p.name.startswith("."):
        return True  # staging dirs and temp files of this evaluation's writers
    if p.name == "cache":  # prediction cache files only
        return p.is_dir() and all(f.suffix == ".jsonl" for f in p.rglob("*") if f.is_file())
    return p.name in BEFORE_PUBLISH and p.is_dir()


def refuse_foreign_output(out_dir: Path, build_dir: Path) -> None:
    """EvalError unless `out_dir` is empty, missing, or an evaluation's own: the data build (or a dir in or
    around it), a training run's directory and a folder of other files are refused before anything is
    written, since publishing would replace its config.yaml, metrics.json and report.md."""
    out, b = resolved(out_dir, "output_dir"), build_dir.resolve()
    fix = "choose another output_dir= (or leave it unset: evals/<model>__<monitor>__<prompt>__shots<k>)"
    if out == b or b in out.parents or out in b.parents:
        where = "is the data build" if out == b else ("is inside" if b in out.parents else "holds") + " the data build"
        raise EvalError(f"output_dir={out_dir} {where} {build_dir}", "output_dir",
                        "choose an output_dir= outside the data build (or leave it unset: "
                        "evals/<model>__<monitor>__<prompt>__shots<k>)")
    if not out_dir.is_dir():
        if out_dir.exists():
            raise EvalError(f"output_dir={out_dir} is a file, not a directory", "output_dir", fix)
        return
    if is_run_dir(out_dir):
        raise EvalError(f"output_dir={out_dir} is a training run's directory (its run.json): the evaluation "
                        "would replace the run's config.yaml and the run could no longer be resumed or checked",
                        "output_dir", fix + "; e.g. output_dir=evals/<run name>")
    if (out_dir / "manifest.json").exists():
        raise EvalError(f"output_dir={out_dir} holds a data build (manifest.json)", "output_dir", fix)
    if is_evaluation_dir(out_dir):
        return
    other = sorted(p.name for p in out_dir.iterdir() if not _before_publish(p))
    if other:
        shown = ", ".join(other[:6]) + (f" (+{len(other) - 6} more)" if len(other) > 6 else "")
        raise EvalError(f"output_dir={out_dir} holds files that are not an evaluation's (no {IDENTITY_FILE} or "
                        f"{METRICS_FILE} of eval/holdout.py): {shown}", "output_dir",
                        fix + " (an evaluation writes only into an empty directory or one of its own)")


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


# The files an output set held before sets listed themselves (OUTPUT_SET): what a rerun into such a
# directory replaces, the rest of it (the cache, further evaluations of a pipeline, the user's) staying.
_LEGACY_FILES = ("config.yaml", "timing.json", "report.md", METRICS_FILE, "matrix.csv", "matrix.md", "heatmap.png",
                 "pareto.png", "curves.png", "robustness.csv", "robustness.png", "stressed_samples.jsonl",
                 "predictions.jsonl")
_LEGACY_MONITOR_FILES = ("predictions.jsonl", METRICS_FILE, "report.md", "curves.png")


def earlier_set(out_dir: Path) -> set[str]:
    """The files of the output set already in `out_dir` (relative paths): its list, or for results from
    before sets were listed, its identity record's files and the names an evaluation writes."""
    listed = output_files(out_dir)
    if listed is not None:
        return listed
    found = {f for f in _LEGACY_FILES if (out_dir / f).is_file()}
    for mon in (out_dir / "monitors").glob("*"):
        found |= {f"monitors/{mon.name}/{f}" for f in _LEGACY_MONITOR_FILES if (mon / f).is_file()}
    try:
        recorded = json.loads((out_dir / IDENTITY_FILE).read_text(encoding="utf-8")).get("files") or []
    except (OSError, ValueError, AttributeError):
        recorded = []
    return found | {f for f in recorded if isinstance(f, str) and (out_dir / f).is_file()}


def _write_set(out_dir: Path, files: set[str]) -> None:
    tmp = out_dir / f"{OUTPUT_SET}.tmp"
    tmp.write_text(json.dumps({"files": sorted(files)}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / OUTPUT_SET)


def publish(stage: Path, out_dir: Path) -> None:
    """Move every file of `stage` to the same place under `out_dir`: identity.json is removed first and
    moved in last, so the set is current only once it is whole. Files of the earlier set that the new one
    lacks (robustness.csv of a run with stress=, monitors/<run>/ of a sweep that had one more run) are
    removed before identity.json moves in; the set's list (OUTPUT_SET) names the union until then, so a
    kill half-way leaves them known to the rerun."""
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_set(out_dir)
    (out_dir / IDENTITY_FILE).unlink(missing_ok=True)
    files = sorted(p for p in stage.rglob("*") if p.is_file() or p.is_symlink())
    new = {p.relative_to(stage).as_posix() for p in files}
    _write_set(out_dir, earlier | new)
    # metrics.json first (a kill after it leaves a directory still known as an evaluation's, see
    # is_evaluation_dir), identity.json last (the set is current only once it is whole)
    files.sort(key=lambda p: {METRICS_FILE: 0, IDENTITY_FILE: 2}.get(p.relative_to(stage).as_posix(), 1))
    for src in files:
        rel = src.relative_to(stage).as_posix()
        if rel == IDENTITY_FILE:
            remove_files(out_dir, earlier - new)
            _write_set(out_dir, new)
        dst = out_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
    if IDENTITY_FILE not in new:  # an incomplete set records no identity
        remove_files(out_dir, earlier - new)
        _write_set(out_dir, new)


@contextmanager
def staged_outputs(out_dir: Path) -> Iterator[Path]:
    """Yield a staging dir for the whole output set; on success publish it into `out_dir`. A full disk
    becomes one EvalError line saying the earlier results are untouched."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if out_dir.is_dir() and not is_evaluation_dir(out_dir):  # the start-up check, again before replacing
        other = [p.name for p in out_dir.iterdir() if not _before_publish(p)]
        if other:
            raise EvalError(f"output_dir={out_dir} now holds files that are not an evaluation's: "
                            f"{', '.join(sorted(other)[:6])}", "output_dir",
                            "move them away and rerun the same command (predictions are cached), or choose "
                            "another output_dir=")
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
