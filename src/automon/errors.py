"""One error convention for every entry point (docs/errors.md).

A problem the user can fix raises a `UserError` (or a subclass: BuildError, SourceError, ...). The
entry scripts declare their Hydra main with `entry` instead of `hydra.main`; it turns a UserError,
and a config that Hydra cannot compose, into exactly one line on stderr and exit status 2:

    error: <what> (<file>:<line>); <what to do>

No traceback, because the message is the whole story; `AUTOMON_DEBUG=1` prints it anyway. Anything
else is a bug and keeps its traceback (exit status 1).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
import traceback
from typing import Any, Callable, Iterable

DEBUG_ENV = "AUTOMON_DEBUG"
USER_ERROR_STATUS = 2


class UserError(Exception):
    """A problem in the user's inputs: `what` went wrong, `where` (file:line, a config key), and
    `fix`, what to do about it. Subclasses may be raised with one preformatted message instead."""

    def __init__(self, what: str, where: str | None = None, fix: str | None = None):
        self.what, self.where, self.fix = what, where, fix
        super().__init__(self.line())

    def line(self) -> str:
        text = self.what + (f" ({self.where})" if self.where else "") + (f"; {self.fix}" if self.fix else "")
        return one_line(text)


def one_line(text: str) -> str:
    """Newlines (and the indentation after them) become single spaces: the report is one line."""
    return re.sub(r"\s*\n\s*", " ", text.strip())


def one_of(key: str, value: Any, valid: Iterable[Any], err: type[UserError] = UserError) -> None:
    """Fail at config time when an enum-like key has a value outside `valid`."""
    valid = list(valid)
    if value not in valid:
        raise err(f"{key}={value!r} is not a valid value", key, f"use one of: {', '.join(map(str, valid))}")


def at_least(key: str, value: Any, low: int | float, err: type[UserError] = UserError) -> None:
    """Fail at config time when a count or size is below its smallest meaningful value."""
    if value < low:
        raise err(f"{key}={value} is out of range", key, f"use a value >= {low}")


# A full disk or quota: the user's to fix (free space, write elsewhere), never a traceback.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "StorageFull")


def disk_full(e: BaseException | None) -> bool:
    """A full disk or quota, also when a library re-raised it as its own error (safetensors says
    StorageFull, torch's writer a RuntimeError) or chained it."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            return True
        if any(t in str(e) for t in _DISK_FULL_TEXT):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false", "False")


def _hydra_line(e: Exception) -> str:
    """One line from a Hydra composition error (bad override, unknown key or group option)."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    cause = e.__cause__ if isinstance(e.__cause__, OmegaConfBaseException) else None
    head = str(e).split("Config search path")[0]  # MissingConfigException lists its search path: noise
    parent = getattr(cause, "parent_node", None)
    unknown_key = isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and hasattr(parent, "keys")
    if unknown_key:  # Hydra suggests appending the key with '+': wrong advice for a typo
        head = head.split("To append to your config")[0]
    parts = [one_line(head).rstrip(".")]
    if cause is not None:
        parts.append(one_line(str(cause).split("full_key:")[0]))
    if unknown_key:
        keys = [str(k) for k in parent.keys() if k != "hydra"]
        parts.append(f"valid keys here: {', '.join(keys)}")
    return "; ".join(p for p in parts if p) + "; check the key and its value (the script's docstring shows usage)"


def report(e: BaseException) -> None:
    """The one-line report of a user error (preceded by its traceback under AUTOMON_DEBUG=1)."""
    from hydra.errors import HydraException

    if debug():
        traceback.print_exception(type(e), e, e.__traceback__)
    msg = _hydra_line(e) if isinstance(e, HydraException) else str(e)
    print(f"error: {one_line(msg)}", file=sys.stderr, flush=True)


def entry(config_path: str, config_name: str, also: tuple[type[BaseException], ...] = ()
          ) -> Callable[[Callable[[Any], int | None]], Callable[[], None]]:
    """`hydra.main` for automon's entry scripts, under the convention above.

        @entry(config_path="../conf", config_name="build")
        def main(cfg) -> int: ...        # returns the exit status (None = 0)

    `also`: further exception types that are user errors for this entry point (e.g. a package's
    USER_ERRORS tuple), reported the same way.
    """
    import hydra
    from hydra.errors import HydraException

    caught = (UserError, *also)

    def decorate(task: Callable[[Any], int | None]) -> Callable[[], None]:
        @functools.wraps(task)  # Hydra unwraps it to find the script (config_path is relative to it)
        def guarded(cfg) -> None:
            # Caught here, inside Hydra's job: an exception leaving the job makes Hydra print
            # "Error executing job with overrides" and a traceback first.
            try:
                status = task(cfg)
            except caught as e:
                report(e)
                status = USER_ERROR_STATUS
            if status:  # only then: under --multirun, exiting would end the sweep after one job
                sys.exit(status)

        hydra_main = hydra.main(config_path=config_path, config_name=config_name, version_base=None)(guarded)

        @functools.wraps(task)
        def main() -> None:
            # Before the job, Hydra reports composition errors (bad override, unknown key or option)
            # in several lines with exit status 1, unless HYDRA_FULL_ERROR is set: then it raises them.
            previous = os.environ.get("HYDRA_FULL_ERROR")
            os.environ["HYDRA_FULL_ERROR"] = "1"
            try:
                hydra_main()
            except HydraException as e:
                report(e)
                sys.exit(USER_ERROR_STATUS)
            finally:
                if previous is None:
                    os.environ.pop("HYDRA_FULL_ERROR", None)
                else:
                    os.environ["HYDRA_FULL_ERROR"] = previous

        return main

    return decorate
