"""A screen of an annotation's kept safety pairs (`annotate.py safety-screen`).

    python data_build/annotate.py safety-screen name=safety_v2 base=safety_v1
    (the third reading, one reply at a time, in annotations/safety_v2/screen/)
"""

from __future__ import annotations

import collections
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from automon.data.safety_annotate import keyed_lines
from automon.data.verdicts import AnnotationError, annotations_dir, verdicts_path

# Two annotators who agree can still both be lenient: read one reply at a time, a careful monitor called
# 4 of 27 benign safety_qa test replies of safety_v1 misbehavior (blind-read-v5-singles-seed113: git history).
# `safety-screen` makes a new annotation from an earlier one and a third reading of its kept pairs' test
# replies, each shown alone (blind_read's format): a kept pair one of whose twins the screen reads
# against its label, or marks broken, is rejected; nothing else changes.

SCREEN_VERSION = "safety-screen-v1"
_SCREEN_KEYS = ("blind_id", "misbehavior", "confidence", "reason", "broken")


@dataclass
class SafetyScreenConfig:
    name: str = "safety_v2"          # annotations/<name>: the new annotation (verdicts.json, screen/)
    base: str = "safety_v1"          # annotations/<base>/verdicts.json: the annotation screened
    root: str = ""                   # where annotations/ is ("" = the repository's)
    # who read the screen, for the dataset card (e.g. "one Claude-based blind reader per file")
    screeners_are: str = ""


def _screen_answers(folder: Path, key: dict) -> dict[str, dict]:
    """blind_id -> answer, from every *.jsonl in `folder` (blind_read's answer format), each keyed item once."""
    got: dict[str, dict] = {}
    lines = keyed_lines(sorted(folder.glob("*.jsonl")), _SCREEN_KEYS, "blind_id", set(key),
                         lambda i: (f"item {i!r} is not in the screen's key.json", "answer only keyed items"),
                         lambda i: (f"item {i} is answered twice", "keep one line per item"))
    for where, row in lines:
        if not isinstance(row["misbehavior"], bool) or not isinstance(row["broken"], bool):
            raise AnnotationError(f"misbehavior / broken are {row['misbehavior']!r} / {row['broken']!r}", where,
                                  "write true or false")
        got[row["blind_id"]] = row
    missing = set(key) - set(got)
    if missing:
        raise AnnotationError(f"{len(missing)} keyed item(s) have no answer, e.g. {sorted(missing)[0]}", str(folder),
                              "answer every item of the screen")
    return got


def safety_screen(cfg: SafetyScreenConfig) -> dict:
    """annotations/<base>/verdicts.json + annotations/<name>/screen/ (key.json: blind_id -> {subset, source,
    label, sample_id}; answers/*.jsonl) -> annotations/<name>/verdicts.json: the base's verdicts with every
    kept pair rejected whose screened twin was read against its label or marked broken."""
    base_path = verdicts_path(cfg.base, cfg.root)
    if not base_path.is_file():
        raise AnnotationError(f"{base_path} is missing", "base", "screen an imported annotation (safety-import)")
    if cfg.name == cfg.base:
        raise AnnotationError(f"name={cfg.name} is the base", "name", "a screen writes a new annotation: name it apart")
    raw = base_path.read_bytes()
    data = json.loads(raw)
    screen = annotations_dir(cfg.root, cfg.name) / "screen"
    if not (screen / "key.json").is_file():
        raise AnnotationError(f"{screen / 'key.json'} is missing", "name",
                              "put the screen's key.json and its answers/ folder there")
    key = json.loads((screen / "key.json").read_text(encoding="utf-8"))
    answers = _screen_answers(screen / "answers", key)
    rejected: dict[str, dict[str, str]] = {}
    tallies: dict[str, collections.Counter] = {}
    for bid in sorted(key):
        k, a = key[bid], answers[bid]
        pairs = data["pairs"].get(k["subset"], {})
        if k["source"] not in pairs:
            raise AnnotationError(f"{bid}: pair {k['source']} is not in {base_path}", str(screen / "key.json"),
                                  f"screen pairs of annotations/{cfg.base} only")
        c = tallies.setdefault(k["subset"], collections.Counter())
        c["misbehavior_read" if k["label"] else "benign_read"] += 1
        against = a["misbehavior"] != bool(k["label"])
        c["misbehavior_missed" if k["label"] and against else "benign_flagged" if against else "agreed"] += 1
        c["broken"] += a["broken"]
        if (against or a["broken"]) and pairs[k["source"]]["status"] == "kept":
            why = ("marked broken" if a["broken"] else
                   "misbehavior twin read as benign" if k["label"] else "benign twin read as misbehavior")
            rejected.setdefault(k["subset"], {})[k["source"]] = f"{why}: {a['reason']}"
    # A screen of a screened annotation keeps the base's screens (the manifest and card list them all).
    earlier = data.get("earlier_screens", []) + ([data["screen"]] if "screen" in data else [])
    out = data  # the base as read; `raw` keeps its bytes for the record's sha256
    out["name"] = cfg.name
    for subset, by_source in rejected.items():
        for source in by_source:
            out["pairs"][subset][source]["status"] = "rejected"
    for subset, v in out["subsets"].items():
        status = [p["status"] for p in out["pairs"].get(subset, {}).values()]
        v.update({f"pairs_{s}": status.count(s) for s in ("kept", "disputed", "rejected")})
        v["pairs_rejected_by_screen"] = v.get("pairs_rejected_by_screen", 0) + len(rejected.get(subset, {}))  # every screen
    out["screen"] = {"version": SCREEN_VERSION, "base": cfg.base, "base_verdicts_sha256": hashlib.sha256(raw).hexdigest(),
                     "screeners_are": cfg.screeners_are,
                     "subsets": {s: {**dict(sorted(c.items())), "pairs_rejected": len(rejected.get(s, {}))}
                                 for s, c in tallies.items()},
                     "rejected": {s: dict(sorted(r.items())) for s, r in sorted(rejected.items())}}
    if earlier:
        out["earlier_screens"] = earlier
    verdicts_path(cfg.name, cfg.root).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out
