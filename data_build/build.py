"""Build the paired test set and the disjoint training corpus.

Usage:
    python data_build/build.py sources.root=../shared/data/raw out=data/builds/v1
    python data_build/build.py out=data/builds/hub                     # every source from the hub
    python data_build/build.py sources.root=../shared/data/raw test.sg_code=100 disjoint.on_conflict=fail
"""

import sys

import hydra

from automon.data.cli import main_build
from automon.config.build import preflight_or_exit, register

register()


@hydra.main(config_path="../conf", config_name="build", version_base=None)
def main(cfg) -> None:
    sys.exit(main_build(cfg))


if __name__ == "__main__":
    preflight_or_exit(sys.argv[1:])
    main()
