"""LoRA SFT of the monitor (docs/training.md).

`run(cfg)` is the whole stage; train/sft.py is a thin Hydra wrapper around it. Importing this
package is cheap: torch, transformers, TRL, PEFT and unsloth are imported inside `run`. No module of
the package imports it back (its submodules import each other by their full names).
"""

from automon.data.io import BuildNotFound
from automon.models.loading import ModelLoadError
from automon.training.errors import RunDirConflict, TrainConfigError, TrainError
from automon.training.run import run

# Errors that are the user's to fix: train/sft.py prints the message and exits 2.
USER_ERRORS = (TrainError, BuildNotFound, ModelLoadError)

__all__ = ["run", "USER_ERRORS", "TrainError", "TrainConfigError", "RunDirConflict"]
