"""The pipeline's checks of its own config before anything runs: `validate` (the settings alone) and
`check_eval_outputs` (the evaluations' output directories, once their configs are composed)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from automon.config.pipeline import STAGES, PipelineConfig
from automon.outdir import OutDirError, PublishError, check_publish_dest, ensure_writable_dir, resolved
from automon.pipeline.stages import PipelineError, StageRun, entry_dirname


def validate(c: PipelineConfig) -> None:
    bad = [s for s in list(c.stages) + list(c.force) if s not in STAGES]
    if bad:
        raise PipelineError(f"unknown stage(s) {bad}; stages are {', '.join(STAGES)}")
    if not c.train.subsets:
        raise PipelineError("train.subsets is empty; e.g. train.subsets=[safety_code,syco_qa]")
    names = [entry_dirname(e) for e in c.train.subsets]
    if len(set(names)) != len(names):
        raise PipelineError(f"train.subsets names a run twice: {c.train.subsets}")
    if c.train.parallel < 1:
        raise PipelineError(f"train.parallel must be >= 1, got {c.train.parallel}")
    if not c.stages:
        raise PipelineError(f"stages is empty: nothing to run; name some of: {', '.join(STAGES)}")
    empty = empty_strings(c)
    if empty:  # a name or path given as `key=`: the stages would write into the current directory
        raise PipelineError(f"{empty}= is empty; give a value, or {empty}=null where the schema allows null")
    if c.python is not None and not _executable(c.python):
        raise PipelineError(f"python={c.python} is not an executable interpreter (python); give the path of a "
                            "Python that has automon installed, or leave python unset (the one running pipeline.py)")
    if Path(c.state_dir).exists() and not Path(c.state_dir).is_dir():
        raise PipelineError(f"state_dir={c.state_dir} is a file, not a directory (state_dir); choose another "
                            "state_dir= (the pipeline's record and logs go there)")
    if c.sources.synthetic_n < 1 or c.sources.synthetic_seed < 0:
        raise PipelineError(f"sources.synthetic_n={c.sources.synthetic_n} (>= 1) and sources.synthetic_seed="
                            f"{c.sources.synthetic_seed} (>= 0) are out of range")


def _executable(path: str) -> bool:
    found = shutil.which(path)
    return found is not None and os.path.isfile(found)


def empty_strings(node: Any, prefix: str = "") -> str | None:
    """The first string setting of the pipeline config that is empty (in lists too), e.g. name=, eval.out=."""
    import dataclasses

    for f in dataclasses.fields(node):
        v, key = getattr(node, f.name), prefix + f.name
        if dataclasses.is_dataclass(v):
            found = empty_strings(v, key + ".")
            if found:
                return found
        elif isinstance(v, str) and not v.strip():
            return key
        elif isinstance(v, list) and any(isinstance(x, str) and not x.strip() for x in v):
            return key
    return None


# The directories an evaluation writes in its own output_dir (automon.evaluation.outputs): a further
# evaluation or the combined report there would be overwritten by it.
_EVAL_OWN_DIRS = ("monitors", "cache")


def check_eval_outputs(c: PipelineConfig, eval_runs: Mapping[str, StageRun]) -> None:
    """Before any compute: each evaluation (`eval_runs`: "eval" and "eval <name>" -> its run) writes a
    directory of its own (one inside another, or two the same, overwrote each other's results), an
    also-entry does not take the main evaluation's name in the combined matrix, and eval.publish would
    replace nothing it did not write."""
    if c.monitor.prompt in c.eval.also:
        raise PipelineError(f"eval.also.{c.monitor.prompt} is named like the main evaluation (its prompt): the "
                            "combined matrix would list one of them; name the also-entry otherwise")
    if "pipeline" in c.eval.also or "combined" in c.eval.also:
        raise PipelineError(f"eval.also.{'pipeline' if 'pipeline' in c.eval.also else 'combined'} is a name the "
                            "pipeline uses itself (its record, the combined report): name the also-entry otherwise")
    check_same_build(eval_runs)
    dirs = {key: resolved(r.cfg.output_dir, "output_dir") for key, r in eval_runs.items()}
    if c.eval.also:
        dirs["the combined report"] = resolved(Path(c.eval.out) / "combined", "eval.out")
    dirs["the pipeline's record (state_dir)"] = resolved(c.state_dir, "state_dir")
    names = list(dirs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            da, db = dirs[a], dirs[b]
            if not (da == db or da in db.parents or db in da.parents):
                continue
            outer, inner = (a, db.relative_to(da)) if da in db.parents else (b, da.relative_to(db)) \
                if db in da.parents else (a, None)
            # by design the further evaluations and the combined report lie in the main evaluation's
            # directory (<eval.out>/<name>), beside what it writes itself, never in one of those
            if outer == "eval" and inner is not None and inner.parts[0] not in _EVAL_OWN_DIRS:
                continue
            if b.startswith("the pipeline's record") and da in db.parents and db.relative_to(da).parts == ("pipeline",):
                continue  # <an evaluation's output_dir>/pipeline: beside its outputs, as the default is
            raise PipelineError(f"{a} and {b} write overlapping directories ({da}, {db}): one would overwrite "
                                "the other's results; give each evaluation an output_dir of its own")
    if c.eval.also and c.eval.publish:
        try:
            check_publish_dest(Path(c.eval.publish), dirs.values())
            if not c.dry_run:
                ensure_writable_dir(c.eval.publish, "eval.publish")
        except (PublishError, OutDirError) as e:
            raise PipelineError(str(e)) from None


def check_same_build(eval_runs: Mapping[str, StageRun]) -> None:
    """Every evaluation of the combined matrix scores one build: an also-entry with another data.dir
    failed in `combine` after every evaluation had run. Two directories holding the same build (one
    manifest) are one build."""
    main = eval_runs.get("eval")
    if main is None:
        return
    here = resolved(main.cfg.data.dir, "data.dir")
    for key, r in eval_runs.items():
        there = resolved(r.cfg.data.dir, "data.dir")
        if there == here or _manifest(there) is not None and _manifest(there) == _manifest(here):
            continue
        raise PipelineError(f"{key} scores the build data.dir={r.cfg.data.dir}, the main evaluation "
                            f"data.dir={main.cfg.data.dir}: the combined matrix compares monitors on one test set; "
                            "leave data.dir out of the eval.also entry (a probe may still learn from another "
                            "build's train split with backend.data_dir=, marked CONTAMINATED where they overlap)")


def _manifest(build: Path) -> bytes | None:
    try:
        return (build / "manifest.json").read_bytes()
    except OSError:
        return None
