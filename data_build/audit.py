"""The shortcut audit of an existing build: can each subset be solved from the response's words alone?

Usage:
    python data_build/audit.py build=data/builds/default            # writes data/builds/default/audit/
    python data_build/audit.py build=data/builds/default audit.on_exceed=fail out=/tmp/audit

Prints the table, writes audit.json, audit.md and audit.png to `out`, and exits 2 when a subset is over
the ceiling and audit.on_exceed=fail. Every build runs the same audit into its manifest.
"""

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)
from automon.config.build import register
from automon.data.cli import main_audit
from automon.errors import entry

register()


@entry(config_path="../conf", config_name="audit")
def main(cfg) -> int:
    return main_audit(cfg)


if __name__ == "__main__":
    main()
