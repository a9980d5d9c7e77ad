"""Imported first by every entry script (eval/holdout.py, train/sft.py, pipeline.py, ...): Ctrl-C while
the rest of the script still imports is the one line and exit status 130 of automon.errors, not a
KeyboardInterrupt traceback. Light on purpose: the standard library and automon.errors only.

    import automon.startup  # noqa: F401  (first: Ctrl-C while importing is one line, exit 130)
"""

from automon.errors import guard_start

guard_start()
