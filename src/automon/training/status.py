"""Whether train/sft.py has anything left to do for a config: `status(cfg)` (what pipeline.py asks).

It resolves the config the way train/sft.py does (automon.training.identity) and asks the run
directory whether it holds that run.
"""

from __future__ import annotations

from typing import Any

from automon.stage_status import Status
from automon.training.identity import resolve, run_status


def status(cfg: Any) -> Status:
    """current (adapter written), resumable, stale (another config's or build's run: needs
    overwrite=true) or missing, for a composed sft.yaml config."""
    return run_status(resolve(cfg))
