"""Whether train/sft.py has anything left to do for a config: `status(cfg)`.

train/sft.py (`automon.training.run`) and pipeline.py both go through `resolve` and
`rundir.run_status`, so they agree on what is current (e.g. a changed train.logging_steps is not a
new run: a finished run stays finished, an unfinished one resumes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from automon.config.train import SFTConfig
from automon.data.io import Build, load_build
from automon.stage_status import Status
from automon.training import rundir as rd


@dataclass
class ResolvedRun:
    """A training config as the run sees it: typed, resolved to plain data, and where it writes."""
    cfg: SFTConfig
    resolved: dict       # what <run>/config.yaml records (output_dir filled in)
    subsets: list[str]
    label: str           # subset label: `safety_qa`, `all`, `a+b`
    run_dir: Path
    build: Build


def resolve(cfg: Any) -> ResolvedRun:
    """Raises TrainConfigError on a bad config and BuildNotFound without a data build."""
    from automon.training.run import _typed, run_dir_for, validate

    c, resolved = _typed(cfg)
    validate(c)
    subsets = rd.subset_names(c.subset.include)
    label = rd.subset_label(subsets)
    run_dir = run_dir_for(c, label)
    resolved["output_dir"] = str(run_dir)
    return ResolvedRun(c, resolved, subsets, label, run_dir, load_build(c.data.dir))


def run_status(r: ResolvedRun) -> Status:
    return rd.run_status(r.run_dir, r.resolved, r.build.manifest_hash, str(r.build.path))


def status(cfg: Any) -> Status:
    """current (adapter written), resumable, stale (another config's or build's run: needs
    overwrite=true) or missing, for a composed sft.yaml config."""
    return run_status(resolve(cfg))
