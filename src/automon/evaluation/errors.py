"""User-facing evaluation errors (automon.errors.UserError): eval/holdout.py reports them as one line,
exit status 2."""

from automon.errors import UserError


class EvalError(UserError, RuntimeError):
    """The evaluation cannot run as configured; the message says what to change."""


class AdapterMismatch(EvalError):
    """An adapter was trained with a different base model, prompt version or thinking setting."""


class IncompleteEvaluation(EvalError):
    """More requests failed than `max_failed_share` allows: the report is marked incomplete."""
