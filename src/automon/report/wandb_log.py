"""Mirror an evaluation's files to Weights & Biases (optional; the files are the record)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)


def mirror(wandb_cfg: Any, out_dir: Path, name: str, config: Mapping[str, Any], summary: Mapping[str, Any],
           tables: Mapping[str, tuple[Sequence[str], Sequence[Sequence[Any]]]],
           images: Mapping[str, Path]) -> str | None:
    """Log tables, images and summary numbers; returns the wandb run directory (None if disabled)."""
    if wandb_cfg.mode == "disabled":
        return None
    import wandb

    wdir = Path(wandb_cfg.dir) if wandb_cfg.dir else out_dir
    wdir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=wandb_cfg.project, entity=wandb_cfg.entity, mode=wandb_cfg.mode, dir=str(wdir),
                     name=name, job_type="eval", config=dict(config))
    try:
        for key, (cols, rows) in tables.items():
            run.log({key: wandb.Table(columns=list(cols), data=[list(r) for r in rows])})
        for key, p in images.items():
            if Path(p).exists():
                run.log({key: wandb.Image(str(p))})
        run.summary.update(dict(summary))
        return str(getattr(run, "dir", "") or "")
    finally:
        run.finish()
