"""Compare a build's split files with an earlier release build's, field by field, every field but
`evidence` (the later release keeps every text and label: docs/data.md "Releases").

Usage:
    python scripts/compare_release.py OLD_BUILD_DIR NEW_BUILD_DIR [--out record.json]

Prints one JSON record per split (samples, fields changed by name, differences outside `evidence`);
exit 1 when a field other than `evidence` differs.
"""

import argparse
import json
import sys
from pathlib import Path

from automon.release import compare_splits


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    for d in (a.old, a.new):
        if not (d / "test.jsonl").is_file():
            print(f"error: no test.jsonl in {d}; give two build directories", file=sys.stderr)
            return 2
    record = {split: compare_splits(a.old / f"{split}.jsonl", a.new / f"{split}.jsonl") for split in ("test", "train")}
    text = json.dumps(record, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n", encoding="utf-8")
    return 1 if any(r["differences"] for r in record.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
