"""User errors of the training stage (automon.errors.UserError): train/sft.py reports them as one line,
exit status 2."""

from automon.errors import UserError


class TrainError(UserError, RuntimeError):
    """A training run that cannot start as configured; the message says what to do."""


class TrainConfigError(TrainError, ValueError):
    """A bad value in the training config (unknown subset, impossible length budget, ...)."""


class RunDirConflict(TrainError):
    """The run directory belongs to a different config or a different data build."""
