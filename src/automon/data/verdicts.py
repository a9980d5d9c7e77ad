"""The safety annotators' verdicts as the build reads them (annotations/<name>/verdicts.json, written
by automon.data.safety_annotate's safety-import; read by the safety recipes and the safety report).

Below both the annotation round trip and the recipes: annotate.py makes its candidates with the
recipes, and the recipes read the verdicts, so neither imports the other for them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from automon.errors import UserError

ANNOTATIONS_ROOT = Path(__file__).resolve().parents[3] / "annotations"


class AnnotationError(UserError, ValueError):
    """An export or import that cannot be done as asked; the message says what to fix."""


@dataclass(frozen=True)
class Verdicts:
    """One annotation round's outcome per candidate pair (keyed by the item's source), read by the
    recipes when `wordings.safety_annotations` names it (automon.data.safety_annotate writes them):
    "kept" pairs (both annotators: misbehavior twin yes, benign twin no, neither broken) may test;
    "rejected" pairs (both annotators contradict a label, or one marks a twin broken, or a screen of the
    kept pairs read a twin against its label: automon.data.safety_screen.safety_screen) are dropped;
    "disputed" pairs (the annotators disagree) and pairs never annotated train only. `digests` are
    the pair_digest of (misbehavior, benign) as annotated: a pair whose text changed since is
    treated as never annotated."""
    status: dict  # source -> "kept" | "rejected" | "disputed"
    digests: dict  # source -> [misbehavior digest, benign digest]
    synthetic: str | None = None  # the synthetic source tree's marker when exported from one


def annotations_dir(root: str, name: str) -> Path:
    return (Path(root) if root else ANNOTATIONS_ROOT) / name


def verdicts_path(name: str, root: str = "") -> Path:
    return annotations_dir(root, name) / "verdicts.json"


def load_verdicts(name: str, subset: str, root: str = "") -> Verdicts:
    """The recipes' view of annotations/<name>/verdicts.json for one subset."""
    path = verdicts_path(name, root)
    if not path.is_file():
        raise AnnotationError(f"wordings.safety_annotations={name}, but {path} does not exist", str(path),
                              f"import the annotators' files first (`python data_build/annotate.py safety-import "
                              f"name={name}`), or build with a wordings version without safety_annotations")
    data = json.loads(path.read_text(encoding="utf-8"))
    pairs = data["pairs"].get(subset, {})
    return Verdicts({src: v["status"] for src, v in pairs.items()}, {src: v["digests"] for src, v in pairs.items()},
                    data.get("synthetic_sources"))
