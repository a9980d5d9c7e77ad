"""The safety annotators' verdicts as the build reads them (annotations/<name>/verdicts.json, written
by automon.data.safety_annotate's safety-import; read by the safety recipes and the safety report), and
the gold evidence of a span-marking round (annotations/<name>/gold.jsonl, written by
automon.data.evidence_gold's evidence-import; read by the safety_qa recipe).

Below both the annotation round trip and the recipes: annotate.py makes its candidates with the
recipes, and the recipes read the verdicts, so neither imports the other for them.
"""

from __future__ import annotations

import hashlib
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


GOLD_FILE = "gold.jsonl"  # in annotations/<SubsetSpec.evidence_gold>/


def response_digest(text: str) -> str:
    """What gold evidence is keyed to besides the sample's source: the response it was marked on."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Gold:
    """Gold evidence by the sample's source: (response_digest of the response marked, quotes)."""
    evidence: dict  # source -> (digest, [quote, ...])
    sha256: str     # of gold.jsonl, recorded in the manifest

    def quotes(self, source: str, response: str) -> list[str] | None:
        """The gold quotes of this source's reply, if it was marked as it reads now (None otherwise)."""
        got = self.evidence.get(source)
        if got is None or got[0] != response_digest(response):
            return None
        return list(got[1])


def load_gold(name: str, root: str = "") -> Gold:
    """annotations/<name>/gold.jsonl as the recipes read it."""
    path = annotations_dir(root, name) / GOLD_FILE
    if not path.is_file():
        raise AnnotationError(f"no gold evidence at {path}", str(path),
                              f"run `python data_build/annotate.py evidence-import name={name}` after both readers "
                              "are done")
    raw = path.read_bytes()
    rows = [json.loads(x) for x in raw.decode("utf-8").splitlines() if x.strip()]
    return Gold({r["source"]: (r["response_sha256"], r["evidence"]) for r in rows}, hashlib.sha256(raw).hexdigest())
