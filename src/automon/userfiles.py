"""Reading the files a user hands a command (an export's export.json, a reader's answers, a key): a file
that is missing, unreadable, torn or of the wrong shape is one UserError naming it (file:line), never a
traceback. The scripts (scripts/*.py, data_build/annotate.py) and the annotation rounds read through here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from automon.errors import UserError


def read_json(path: str | Path, fix: str, err: type[UserError] = UserError, shape: type = dict) -> Any:
    """The JSON document at `path`, which must be a `shape` (a dict unless told)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise err(f"{p} does not exist", str(p), fix) from None
    except OSError as e:
        raise err(f"{p} cannot be read ({e.strerror})", str(p), fix) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f"{p}:{e.lineno}" if isinstance(e, json.JSONDecodeError) else str(p)
        raise err(f"{p} is not JSON ({getattr(e, 'msg', e)}): torn or hand-edited?", where, fix) from None
    if not isinstance(doc, shape):
        raise err(f"{p} holds a JSON {type(doc).__name__}, not a {shape.__name__}", str(p), fix)
    return doc


def json_lines(path: str | Path, fix: str, err: type[UserError] = UserError) -> Iterator[tuple[str, Any]]:
    """("file:line", parsed row) of every non-empty line of a JSON-lines file; a missing file or a line
    that is not a JSON object is one `err` naming it."""
    p = Path(path)
    try:
        f = open(p, encoding="utf-8")
    except FileNotFoundError:
        raise err(f"{p} does not exist", str(p), fix) from None
    except OSError as e:
        raise err(f"{p} cannot be read ({e.strerror})", str(p), fix) from None
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise err(f"not a JSON line ({e.msg})", where, fix) from None
            if not isinstance(row, dict):
                raise err(f"a JSON {type(row).__name__}, not an object", where, fix)
            yield where, row
