"""User errors of the training stage: train/sft.py prints them as one paragraph and exits 2."""


class TrainError(RuntimeError):
    """A training run that cannot start as configured; the message says what to do."""


class TrainConfigError(TrainError, ValueError):
    """A bad value in the training config (unknown subset, impossible length budget, ...)."""


class RunDirConflict(TrainError):
    """The run directory belongs to a different config or a different data build."""
