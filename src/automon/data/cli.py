"""What data_build/build.py runs: the build, with a kill by SIGTERM cleaning up like an error does.

User errors (BuildError, SourceError, ...) propagate to `automon.errors.run_cli`, which prints
them as one line and exits 2.
"""

from __future__ import annotations

import logging
import signal
import sys

from automon.data.io import BUILD_COMMAND  # noqa: F401  (re-exported for messages elsewhere)
from automon.data.pipeline import run_build


def _exit_on_sigterm(signum, frame) -> None:
    # SystemExit unwinds through the build's `finally` blocks (temp dir removed, sandbox workers
    # stopped); Python's default for SIGTERM would end the process on the spot and leave them.
    raise SystemExit(128 + signum)


def main_build(cfg) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    manifest = run_build(cfg)
    c = manifest["counts"]
    n = {split: sum(v for sub in c.get(split, {}).values() for v in sub.values()) for split in ("test", "train")}
    print(f"wrote {cfg.out}: test {n['test']:,} samples, train {n['train']:,} samples "
          f"(manifest.json, README.md)")
    return 0
