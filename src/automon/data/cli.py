"""What data_build/build.py runs: the build, with user errors turned into one clear message."""

from __future__ import annotations

import logging
import sys

from automon.data.io import BUILD_COMMAND  # noqa: F401  (re-exported for messages elsewhere)
from automon.data.pipeline import BuildError, run_build
from automon.sources import SourceError


def main_build(cfg) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    try:
        manifest = run_build(cfg)
    except (BuildError, SourceError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = manifest["counts"]
    n = {split: sum(v for sub in c.get(split, {}).values() for v in sub.values()) for split in ("test", "train")}
    print(f"wrote {cfg.out}: test {n['test']:,} samples, train {n['train']:,} samples "
          f"(manifest.json, README.md)")
    return 0
