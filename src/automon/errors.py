"""One error convention for every entry point (docs/errors.md).

A problem the user can fix raises a `UserError` (or a subclass: BuildError, SourceError, ...). The
entry scripts declare their Hydra main with `entry` instead of `hydra.main`; it turns a UserError,
and a config that Hydra cannot compose, into exactly one line on stderr and exit status 2 (Ctrl-C: one
line and exit status 130):

    error: <what> (<file>:<line>); <what to do>

No traceback, because the message is the whole story; `AUTOMON_DEBUG=1` prints it anyway. Anything
else is a bug and keeps its traceback (exit status 1).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import signal
import sys
import traceback
from typing import Any, Callable, Iterable

DEBUG_ENV = "AUTOMON_DEBUG"
USER_ERROR_STATUS = 2


class ConfigError(ValueError):
    """A configuration that cannot work; the message says what to change. Defined here, below every
    package, because schemas of all layers raise it (automon.config re-exports it)."""


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


HYDRA_USAGE = "; check the key and its value (the script's docstring shows usage)"


def hydra_line(e: Exception) -> str:
    """One line from a Hydra composition error (bad override, unknown key or group option): Hydra's
    advice to append a typo with '+' dropped, the keys valid there listed instead."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    cause = e.__cause__ if isinstance(e.__cause__, OmegaConfBaseException) else None
    head = str(e).split("Config search path")[0]  # MissingConfigException lists its search path: noise
    parent = getattr(cause, "parent_node", None)
    unknown_key = isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and hasattr(parent, "keys")
    if unknown_key:  # Hydra suggests appending the key with '+': wrong advice for a typo
        head = head.split("To append to your config")[0]
    parts = [one_line(head).rstrip(".")]
    retired = re.search(r"'wordings/(\w+)'", head)  # a retired data version: say which commit builds it
    if retired:
        from automon.release import retired_message

        parts.append(retired_message(retired.group(1)) or "")
    if cause is not None:
        parts.append(one_line(str(cause).split("full_key:")[0]))
    if unknown_key:
        keys = [str(k) for k in parent.keys() if k != "hydra"]
        parts.append(f"valid keys here: {', '.join(keys)}")
    return "; ".join(p for p in parts if p) + HYDRA_USAGE


def report(e: BaseException) -> None:
    """The one-line report of a user error (preceded by its traceback under AUTOMON_DEBUG=1)."""
    if debug():
        traceback.print_exception(type(e), e, e.__traceback__)
    hydra_errors = sys.modules.get("hydra.errors")  # a script without Hydra does not import it for this
    msg = hydra_line(e) if hydra_errors and isinstance(e, hydra_errors.HydraException) else str(e)
    print(f"error: {one_line(msg)}", file=sys.stderr, flush=True)


def unknown_flags(argv: list[str]) -> str | None:
    """One line about command-line flags Hydra's parser does not know (or a bad value of one it does),
    None when there are none: key=value overrides are Hydra's to check."""
    import argparse

    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        _, rest = parser.parse_known_args(argv)
    except argparse.ArgumentError as e:
        return f"{e}; see --help"
    flags = [a for a in rest if a.startswith("-")]
    if not flags:
        return None
    return (f"unknown option(s) {' '.join(flags)}; settings are key=value (e.g. output_dir=runs/x), and the "
            "options are Hydra's: --help, --cfg job, -m (a sweep)")


INTERRUPTED_STATUS = 128 + 2  # 128 + SIGINT, as for every signal that stops a stage (SIGTERM: 143)


def interrupted(e: BaseException) -> int:
    """Ctrl-C: one line, not a KeyboardInterrupt traceback (AUTOMON_DEBUG=1 shows it). What was finished
    is kept (a build's temp dir and an evaluation's staging dir are removed on the way out, predictions
    stay cached), so the same command carries on. Returns the exit status."""
    if debug():
        traceback.print_exception(type(e), e, e.__traceback__)
    print("error: interrupted (Ctrl-C); nothing half-written is left as finished: rerun the same command to "
          "carry on (finished work, checkpoints and cached predictions are kept)", file=sys.stderr, flush=True)
    return INTERRUPTED_STATUS


def _interrupted_while_starting(signum: int, frame: Any) -> None:
    raise exit_by_signal(signum, interrupted(KeyboardInterrupt()))


def exit_by_signal(signum: int, status: int | None = None) -> SystemExit:
    """The SystemExit a signal handler raises to end the process (status 128 + signum unless given),
    marked with the signal so that `resend_dropped_signals` can send it again should Python drop it."""
    e = SystemExit(128 + signum if status is None else status)
    e.signum = signum
    return e


def _resend_dropped_signal(unraisable: Any) -> None:
    """sys.unraisablehook (resend_dropped_signals). Python runs a signal handler at the main thread's
    next bytecode, which may be a weakref callback's or a __del__'s; an exception raised there is
    printed as 'Exception ignored in ...' and dropped, and the process runs on as if never signalled
    (CI saw a SIGTERMed build finish). A KeyboardInterrupt, or a SystemExit from exit_by_signal, lost
    that way is sent again: shortly and from another thread, so that it lands in the main thread's own
    code once this hook has returned (raised in here it would be dropped too). Should it land in a
    finalizer again, it comes back here."""
    e = unraisable.exc_value
    if isinstance(e, KeyboardInterrupt):
        signum = signal.SIGINT
    elif isinstance(e, SystemExit) and hasattr(e, "signum"):
        signum = e.signum
    else:
        sys.__unraisablehook__(unraisable)
        return
    import threading  # here: automon.startup imports this module first thing, and keeps that light

    resend = threading.Timer(0.05, os.kill, (os.getpid(), signum))
    resend.daemon = True
    resend.start()


def resend_dropped_signals() -> None:
    """Install `_resend_dropped_signal`: a Ctrl-C or a SIGTERM is never lost to a finalizer. Forked
    children inherit it; guard_start (every entry script) installs it."""
    sys.unraisablehook = _resend_dropped_signal


def guard_start() -> None:
    """Ctrl-C while an entry script still imports (torch, hydra, ...: the first second or so, before
    `entry` runs) gives the same one line and exit status 130 as later, not a KeyboardInterrupt
    traceback. Every entry script imports automon.startup first, which calls this; `entry` (or the
    script's own main: end_start) hands Ctrl-C back to Python's KeyboardInterrupt where it catches it.
    Leaves SIGINT alone where it is not Python's default (ignored in a background job, a caller's own)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    resend_dropped_signals()


def end_start() -> None:
    """From here on Ctrl-C is a KeyboardInterrupt again (the caller catches it with `interrupted`)."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def script_main(main: Callable[[list[str]], int | None], argv: list[str],
                also: tuple[type[BaseException], ...] = ()) -> int:
    """The convention above for a script with plain arguments (scripts/*.py, data_build/annotate.py):
    `main(argv)` returns the exit status (None = 0); a UserError (or `also`) is one line and exit status 2,
    Ctrl-C one line and 130. Returns the status (the script exits with it)."""
    end_start()
    try:
        return main(argv) or 0
    except (UserError, *also) as e:
        report(e)
        return USER_ERROR_STATUS
    except KeyboardInterrupt as e:
        return interrupted(e)


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
            except KeyboardInterrupt as e:
                status = interrupted(e)
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
                end_start()  # Ctrl-C: a KeyboardInterrupt, caught below or by the job (training checkpoints)
                flags = unknown_flags(sys.argv[1:])
                if flags:  # argparse would print its 7-line usage
                    print(f"error: {flags}", file=sys.stderr, flush=True)
                    sys.exit(USER_ERROR_STATUS)
                hydra_main()
            except HydraException as e:
                report(e)
                sys.exit(USER_ERROR_STATUS)
            except KeyboardInterrupt as e:  # Ctrl-C before or after the job (composing the config, exiting)
                sys.exit(interrupted(e))
            finally:
                if previous is None:
                    os.environ.pop("HYDRA_FULL_ERROR", None)
                else:
                    os.environ["HYDRA_FULL_ERROR"] = previous

        return main

    return decorate
