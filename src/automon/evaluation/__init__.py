"""Held-out evaluation of monitors. eval/holdout.py calls `run(cfg)`."""

from automon.adapter_meta import AdapterError
from automon.data.io import BuildNotFound
from automon.config.eval import ConfigError
from automon.evaluation.errors import AdapterMismatch, EvalError
from automon.evaluation.run import EvalResult, evaluate, run  # noqa: F401
from automon.backends.base import JudgeError
from automon.models.loading import ModelLoadError

# Errors a user can fix: eval/holdout.py prints the message (no traceback) and exits with status 2.
USER_ERRORS = (EvalError, AdapterMismatch, AdapterError, BuildNotFound, ModelLoadError, JudgeError, ConfigError)
