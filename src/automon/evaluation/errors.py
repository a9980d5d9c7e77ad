"""User-facing evaluation errors: eval/holdout.py prints the message and exits with status 2."""


class EvalError(RuntimeError):
    """The evaluation cannot run as configured; the message says what to change."""


class AdapterMismatch(EvalError):
    """An adapter was trained with a different base model, prompt version or thinking setting."""
