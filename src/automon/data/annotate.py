"""Two-annotator round trip for free-text test items (the paper's double-blind confirmation).

    python data_build/annotate.py export build=data/builds/policy annotators=2 out=annotation/
    python data_build/annotate.py import build=data/builds/policy labels=annotation/ out=data/builds/policy-agreed

export: the test samples of `subsets` (default: the subsets whose SubsetSpec.confirm_by_default is set,
free text, where no grader exists) go to one
file per annotator, `annotator_<k>.jsonl`, each line {"item", "request", "response", "label": null}:
blinded (no label, pair, source or meta; `item` is a hash of the sample id) and shuffled in a
different seeded order per annotator. `export.json` records which build and subsets were exported
(no labels). Annotators set "label" to 1 (misbehavior) or 0 (benign) in their own file.

import: reads every annotator file back, checks that each labelled every exported item once with
0 or 1, computes Cohen's kappa (pairwise, averaged when more than two annotators) and raw
agreement, and writes a new build: the annotated subsets' test pairs are kept only when every
annotator agrees with every other and with the sample's label, for both twins; other subsets and
the training split are copied unchanged. The manifest and card record the agreement.

The safety subsets are annotated from their source candidates instead, before a build
(automon.data.safety_annotate: safety-export, safety-import; automon.data.safety_screen:
safety-screen); data_build/annotate.py runs every command (automon.data.annotate_cli).
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List

from automon.data.card import dataset_card
from automon.data.hub import features_of
from automon.data.io import load_build, write_build
from automon.data.recipes.common import short_hash
from automon.data.verdicts import AnnotationError
from automon.errors import at_least
from automon.subsets import specs as subset_specs
from automon import userfiles
from automon.userfiles import read_json

ANNOTATE_VERSION = "annotate-v1"


def _confirmed_by_default() -> list[str]:
    """The subsets whose test pairs export annotates by default (SubsetSpec.confirm_by_default)."""
    return [s.name for s in subset_specs() if s.confirm_by_default]


@dataclass
class ExportConfig:
    build: str = ""                      # the data build whose test samples are annotated
    out: str = "annotation"              # directory for annotator_<k>.jsonl and export.json
    annotators: int = 2
    subsets: List[str] = field(default_factory=_confirmed_by_default)  # free-text subsets to annotate
    seed: int = 0                        # the per-annotator shuffles
    overwrite: bool = False


@dataclass
class ImportConfig:
    build: str = ""                      # the build that was exported
    labels: str = "annotation"           # the directory with the annotators' filled files
    out: str = ""                        # the new build (agreed test pairs only)
    overwrite: bool = False


def item_id(sample_id: str) -> str:
    """The blinded id of a sample: stable, and no label, pair or source in it."""
    return short_hash("annotate", sample_id, n=16)


def _annotated(build, subsets: list[str]) -> list:
    test = build.samples("test")
    unknown = sorted(set(subsets) - {s.subset for s in test})
    if unknown:
        raise AnnotationError(f"the build at {build.path} has no test samples of {unknown}", "subsets",
                              "name subsets the build has")
    return [s for s in test if s.subset in subsets]


def export(cfg: ExportConfig) -> dict:
    if not cfg.build:
        raise AnnotationError("no build given", "build", "pass build=<a data build directory>")
    at_least("annotators", cfg.annotators, 2, AnnotationError)
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise AnnotationError(f"out={out} is a file, not a directory", "out", "choose a new or empty directory")
    if out.exists() and any(out.iterdir()) and not cfg.overwrite:
        raise AnnotationError(f"{out} exists and is not empty", "out",
                              "choose another out= or pass overwrite=true (filled label files there are lost)")
    build = load_build(cfg.build, verify=("test",))
    samples = _annotated(build, list(cfg.subsets))
    out.mkdir(parents=True, exist_ok=True)
    for k in range(1, cfg.annotators + 1):
        rows = [{"item": item_id(s.id), "request": s.request, "response": s.response, "label": None} for s in samples]
        random.Random(f"{cfg.seed}:{k}").shuffle(rows)  # each annotator sees their own order
        with open(out / f"annotator_{k}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    info = {"version": ANNOTATE_VERSION, "build": str(cfg.build), "build_manifest_sha256": build.manifest_hash,
            "subsets": list(cfg.subsets), "annotators": cfg.annotators, "items": len(samples), "seed": cfg.seed}
    (out / "export.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def cohen_kappa(a: list[int], b: list[int]) -> float | None:
    """Cohen's kappa of two label lists; None when chance agreement is 1 (both gave one label only)."""
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    pe = sum((a.count(c) / n) * (b.count(c) / n) for c in set(a) | set(b))
    return None if pe == 1 else (po - pe) / (1 - pe)


def json_lines(path: Path, fix: str) -> Iterator[tuple[str, object]]:
    """("file:line", parsed row) of every non-empty line of a JSON-lines file; a line that is not a JSON
    object is one AnnotationError naming it, with `fix` as what to do (automon.userfiles.json_lines)."""
    return userfiles.json_lines(path, fix, AnnotationError)


def _read_labels(path: Path, expected: set[str]) -> dict[str, int]:
    got: dict[str, int] = {}
    for where, row in json_lines(path, "fix the line as exported"):
        item, label = row.get("item"), row.get("label")
        if item not in expected:
            raise AnnotationError(f"item {item!r} was not exported", where, "label only the exported items")
        if item in got:
            raise AnnotationError(f"item {item} is labelled twice", where, "keep one line per item")
        if label not in (0, 1) or isinstance(label, bool):
            raise AnnotationError(f"item {item} has label {label!r}", where,
                                  "set label to 1 (misbehavior) or 0 (benign)")
        got[item] = label
    missing = expected - set(got)
    if missing:
        raise AnnotationError(f"{len(missing)} exported item(s) are not labelled, e.g. {sorted(missing)[0]}",
                              str(path), "label every item (0 or 1)")
    return got


def import_labels(cfg: ImportConfig) -> dict:
    if not cfg.build or not cfg.out:
        raise AnnotationError("build= and out= are both needed", None,
                              "pass build=<the exported build> labels=<dir> out=<new build dir>")
    labels_dir = Path(cfg.labels)
    info_path = labels_dir / "export.json"
    if not info_path.is_file():
        raise AnnotationError(f"no export.json in {labels_dir}", "labels", "point labels= at the export's directory")
    fix = "point labels= at an export's directory, its export.json as `annotate.py export` wrote it"
    info = read_json(info_path, fix, AnnotationError)
    shape = {"build_manifest_sha256": str, "subsets": list, "annotators": int}
    bad = [k for k, t in shape.items() if not isinstance(info.get(k), t)]
    if bad:
        raise AnnotationError(f"{info_path} lacks {', '.join(bad)} (or has another type): not an export's record",
                              str(info_path), fix)
    build = load_build(cfg.build, verify=("test", "train"))
    if info["build_manifest_sha256"] != build.manifest_hash:
        raise AnnotationError(f"the labels in {labels_dir} were exported from another build (or {cfg.build} was "
                              "rebuilt since)", "build", "import them into the build they were exported from")
    samples = _annotated(build, info["subsets"])
    by_item = {item_id(s.id): s for s in samples}
    files = [labels_dir / f"annotator_{k}.jsonl" for k in range(1, info["annotators"] + 1)]
    for f in files:
        if not f.is_file():
            raise AnnotationError(f"{f} is missing", "labels", f"collect all {info['annotators']} annotators' files")
    labels = [_read_labels(f, set(by_item)) for f in files]
    items = sorted(by_item)
    kappas = [cohen_kappa([la[i] for i in items], [lb[i] for i in items]) for la, lb in itertools.combinations(labels, 2)]
    defined = [k for k in kappas if k is not None]
    agreed = {i for i in items if len({la[i] for la in labels}) == 1}
    ok = {by_item[i].id for i in agreed if labels[0][i] == by_item[i].label}
    pairs: dict[str, list] = {}
    for s in samples:
        pairs.setdefault(s.pair_id, []).append(s)
    keep = {s.id for twins in pairs.values() if all(t.id in ok for t in twins) for s in twins}
    subsets = set(info["subsets"])
    test = [s for s in build.samples("test") if s.subset not in subsets or s.id in keep]
    manifest = {k: v for k, v in build.manifest.items() if k not in ("files", "counts", "format")}
    manifest["annotation"] = {
        "version": ANNOTATE_VERSION, "subsets": info["subsets"], "annotators": info["annotators"],
        "items": len(items), "cohen_kappa": (sum(defined) / len(defined)) if defined else None,
        "cohen_kappa_pairs": kappas, "raw_agreement": len(agreed) / len(items) if items else None,
        "agreed": len(agreed), "agreed_and_match_label": len(ok),
        "agreed_against_label": sum(1 for i in agreed if labels[0][i] != by_item[i].label),
        "test_pairs_kept": len(keep) // 2, "test_pairs_dropped": len(pairs) - len(keep) // 2,
        "from_build_manifest_sha256": build.manifest_hash,
    }
    out = Path(cfg.out)
    if out.exists() and not cfg.overwrite:
        raise AnnotationError(f"{out} exists", "out", "choose another out= or pass overwrite=true")
    # A build written by data_build/build.py has a card; a bare one (write_build by hand) does not.
    train = build.samples("train")
    card = ({"README.md": lambda m: dataset_card(m, None, features_of(train + test))}
            if (build.path / "README.md").is_file() else None)
    return write_build(out, train, test, manifest, overwrite=cfg.overwrite, extra_files=card)
