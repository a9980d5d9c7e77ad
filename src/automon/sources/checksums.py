"""Source files checked against a `sha256sum` list (shared/data/raw/SHA256SUMS).

The list's paths are relative to the directory `sha256sum -c` runs in, which need not be the
list's own (shared/data/raw/SHA256SUMS names `data/raw/...`, relative to shared/): a file is
looked up under the list's directory and then under each of its ancestors, nearest first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from automon.errors import UserError

NAME = "SHA256SUMS"
ON_MISMATCH = ("fail", "warn")
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def _abs(p: str | os.PathLike) -> str:
    return os.path.normpath(os.path.abspath(p))


@dataclass
class ChecksumList:
    path: Path
    entries: dict[str, str]  # path as listed -> sha256 (lower case)

    def expected(self, file: str | os.PathLike) -> str | None:
        """The listed sha256 of `file`, or None if the list does not name it."""
        f = _abs(file)
        base = os.path.dirname(_abs(self.path))
        while True:
            if f.startswith(base.rstrip(os.sep) + os.sep):
                digest = self.entries.get(os.path.relpath(f, base).replace(os.sep, "/"))
                if digest is not None:
                    return digest
            parent = os.path.dirname(base)
            if parent == base:
                return None
            base = parent


def default_list(root: str | os.PathLike) -> Path | None:
    """SHA256SUMS in the sources root, else beside it; None if there is none."""
    root = Path(root)
    for p in (root / NAME, root.parent / NAME):
        if p.is_file():
            return p
    return None


def load_list(path: str | os.PathLike) -> ChecksumList:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read the checksum list: {e}", str(path),
                        "fix sources.checksums, or leave it unset to use SHA256SUMS in sources.root") from e
    entries: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise UserError("not a sha256sum line (expected '<64 hex digits>  <path>')", f"{path}:{lineno}",
                            "fix the line, or regenerate the list with sha256sum")
        name = m.group(2)
        entries[name[2:] if name.startswith("./") else name] = m.group(1).lower()
    return ChecksumList(path, entries)
