"""Build the paired test set and the disjoint training corpus.

Usage:
    python data_build/build.py sources.root=../shared/data/raw out=data/builds/default
    python data_build/build.py out=data/builds/hub                     # every source from the hub
    python data_build/build.py sources.root=../shared/data/raw test.sg_code=100 disjoint.on_conflict=fail
"""

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)
from automon.config.build import register
from automon.data.cli import main_build
from automon.errors import entry

register()


@entry(config_path="../conf", config_name="build")
def main(cfg) -> int:
    return main_build(cfg)


if __name__ == "__main__":
    main()
