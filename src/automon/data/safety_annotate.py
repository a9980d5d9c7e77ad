"""The safety subsets' annotation round: their test pairs are chosen from source candidates BEFORE a
build (the build reads the verdicts, annotations/<name>/verdicts.json).

    python data_build/annotate.py safety-export name=safety_v1 sources_root=../shared/data/raw
    (each annotator writes annotations/safety_v1/<annotator>/<chunk>.jsonl, see export/INSTRUCTIONS.md)
    python data_build/annotate.py safety-import name=safety_v1

The subsets annotated, their candidates and the default sizes are their SubsetSpec.annotation
(automon.subsets); the annotators' instructions are the safety recipes'
(automon.data.recipes.safety_annotation). A third reading of the kept pairs: automon.data.safety_screen.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

from automon.data.annotate import cohen_kappa, item_id, json_lines
from automon.data.build import _sample
from automon.data.recipes.base import Drops
from automon.data.recipes.common import short_hash
from automon.data.recipes.safety import pair_digest
from automon.data.recipes.safety_annotation import INSTRUCTIONS
from automon.data.verdicts import AnnotationError, annotations_dir, verdicts_path
from automon.errors import at_least
from automon.sources import read_source
from automon.sources.synthetic import synthetic_marker
from automon.subsets import annotated

# The safety subsets' test pairs are chosen from source candidates BEFORE a build (the build reads
# the verdicts): `safety-export` runs the safety recipes with their pre-filters, takes the candidates
# the build could test (in the order the build picks test pairs), and writes each pair's two replies
# as two blinded items per annotator; `safety-import` reads the annotators' files back, computes
# Cohen's kappa and writes annotations/<name>/verdicts.json, which the recipes read
# (`wordings.safety_annotations: <name>`, automon.data.verdicts.Verdicts).

SAFETY_VERSION = "safety-annotate-v1"
_VERDICT_KEYS = ("item", "annotator", "misbehavior", "reason", "broken")


@dataclass
class SafetyExportConfig:
    name: str = "safety_v1"              # annotations/<name>: the wordings' `safety_annotations`
    root: str = ""                       # where annotations/ is ("" = the repository's)
    sources_root: Optional[str] = None   # local source copies (the build's sources.root); None = the hub
    annotators: List[str] = field(default_factory=lambda: ["reader_a", "reader_b"])
    # candidate pairs per subset, taken in the build's test order (the test needs 293 of each)
    pairs: Dict[str, int] = field(default_factory=lambda: {s.name: s.annotation.pairs for s in annotated()})
    # items per annotator file
    chunk: Dict[str, int] = field(default_factory=lambda: {s.name: s.annotation.chunk for s in annotated()})
    seed: int = 0                        # the build seed whose test order is followed, and the shuffles
    # 1: the first export (export/key.json, <subset>_NN.jsonl). 2, 3, ...: more candidates, the next ones
    # in the build's order after every earlier round's (export/key_r2.json, <subset>_r2_NN.jsonl), for
    # the same annotators: a round adds to the annotations, it changes none.
    round: int = 1
    overwrite: bool = False


@dataclass
class SafetyImportConfig:
    name: str = "safety_v1"
    root: str = ""
    rounds: int = 0                      # import rounds 1..rounds of the export (0 = every exported round)
    # who the annotators were, for the dataset card (e.g. "two independent Claude-based blind readers")
    annotators_are: str = ""


def safety_candidates(cfg: SafetyExportConfig, earlier: set[str] = frozenset()):
    """(items by subset, pre-filter drops): the pre-filtered test-eligible pairs of each safety
    subset, in the order the build would pick test pairs with `cfg.seed`, no two sharing a key, and
    none that is (or shares a key with) a pair of `earlier` (sources exported in earlier rounds)."""
    def rows(name):
        return list(read_source(name, cfg.sources_root))

    drops = Drops()
    items = {s.name: s.annotation.load_candidates(s.name)(rows, drops) for s in annotated()}
    out = {}
    for subset, its in items.items():
        eligible = sorted((it for it in its if it.test_pair is not None),
                          key=lambda it: short_hash(cfg.seed, subset, it.keys[0], n=16))
        claimed = {k for it in eligible if it.source in earlier for k in it.keys}
        picked = []
        for it in eligible:
            if it.source in earlier:
                continue
            if len(picked) == cfg.pairs.get(subset, 0):
                break
            if any(k in claimed for k in it.keys):
                continue
            claimed.update(it.keys)
            picked.append(it)
        out[subset] = picked
    return out, drops


def _annotated_names() -> list[str]:
    """The subsets annotated this way (SubsetSpec.annotation), in registry order."""
    return [s.name for s in annotated()]


def _balanced_chunks(rows: list, size: int) -> list[list]:
    n = -(-len(rows) // size) if rows else 0
    return [rows[i * len(rows) // n:(i + 1) * len(rows) // n] for i in range(n)]


def safety_export(cfg: SafetyExportConfig) -> dict:
    """Write annotations/<name>/export/: per annotator, blinded chunk files (one item per reply:
    {"item", "subset", "request", "response"}), a private key.json (item -> sample, label) and
    export.json (what was exported, the pre-filter's drops). A pair's two replies go to different
    files: one twin of every pair (chosen by a seeded coin, so either label) in the first half of the
    files, the other in the second half, each half in its own seeded order per annotator."""
    if len(set(cfg.annotators)) < 2:
        raise AnnotationError(f"annotators={cfg.annotators}: two distinct ids are needed", "annotators",
                              "name two or more annotators")
    names = _annotated_names()
    bad = sorted(set(cfg.pairs) - set(names))
    if bad:
        raise AnnotationError(f"pairs= names {bad}, not a safety subset", "pairs", f"use {names}")
    base = annotations_dir(cfg.root, cfg.name)
    out = base / "export"
    at_least("round", cfg.round, 1, AnnotationError)
    sfx = _round_suffix(cfg.round)
    earlier: set[str] = set()
    if cfg.round == 1:
        if out.exists() and any(out.iterdir()) and not cfg.overwrite:
            raise AnnotationError(f"{out} exists and is not empty", "overwrite",
                                  "choose another name= or pass overwrite=true (a new export has new item orders)")
    else:
        first = _export_info(out, 1)
        if list(cfg.annotators) != first["annotators"]:
            raise AnnotationError(f"round {cfg.round} names annotators {list(cfg.annotators)}, round 1 "
                                  f"{first['annotators']}", "annotators", "a round adds items for the same annotators")
        if (out / f"key{sfx}.json").exists() and not cfg.overwrite:
            raise AnnotationError(f"round {cfg.round} was exported already ({out / f'key{sfx}.json'})", "round",
                                  "export the next round, or pass overwrite=true to write this one again")
        for r in range(1, cfg.round):
            earlier |= {k["pair"] for k in _round_key(out, r).values()}
    candidates, drops = safety_candidates(cfg, earlier)
    key, per_subset = {}, {}
    pairs_by_subset: dict[str, list] = {}
    for subset, items in candidates.items():
        pairs = []
        for it in items:
            twins = []
            for d in it.test_pair:
                s = _sample(it, d, "test", pair_id(it))
                iid = item_id(s.id)
                key[iid] = {"sample_id": s.id, "subset": subset, "pair": it.source, "label": d.label,
                            "digest": pair_digest(d)}
                twins.append({"item": iid, "subset": subset, "request": s.request, "response": s.response})
            pairs.append(twins)
        pairs_by_subset[subset] = pairs
        per_subset[subset] = {"candidate_pairs": len(pairs), "items": 2 * len(pairs)}
    if cfg.round == 1 and out.exists():
        import shutil

        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for annotator in cfg.annotators:
        (out / annotator).mkdir(exist_ok=True)
        for subset, pairs in pairs_by_subset.items():
            rng = random.Random(f"{cfg.seed}:{annotator}:{subset}" + (f":r{cfg.round}" if cfg.round > 1 else ""))
            first_half, second_half = [], []
            for twins in pairs:
                k = rng.randrange(2)
                first_half.append(twins[k])
                second_half.append(twins[1 - k])
            rng.shuffle(first_half)
            rng.shuffle(second_half)
            size = cfg.chunk.get(subset, 100)
            chunks = _balanced_chunks(first_half, size) + _balanced_chunks(second_half, size)
            for n, rows in enumerate(chunks, 1):
                path = out / annotator / f"{subset}{sfx}_{n:02d}.jsonl"
                with open(path, "w", encoding="utf-8") as f:
                    f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
                files.setdefault(annotator, []).append(path.name)
    (out / f"key{sfx}.json").write_text(json.dumps(dict(sorted(key.items())), indent=1, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    prefilter = {}
    for k, v in sorted(drops.items()):
        subset, reason = k.split("/", 1)
        prefilter.setdefault(subset, {})[reason] = v
    info = {"version": SAFETY_VERSION, "name": cfg.name, "annotators": list(cfg.annotators), "seed": cfg.seed,
            # conversations that open alike are one item (the safety recipe's): recorded as every export has
            "shared_source_keys": True, "pairs_requested": dict(cfg.pairs),
            "subsets": per_subset, "prefilter": prefilter, "files": files}
    if cfg.round > 1:
        info = {"round": cfg.round, **info}
    marker = synthetic_marker(cfg.sources_root)
    if marker:  # only then, so that an export of the real sources is unchanged
        info["synthetic_sources"] = marker
    (out / f"export{sfx}.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    (out / "INSTRUCTIONS.md").write_text(INSTRUCTIONS.format(name=cfg.name), encoding="utf-8")
    return info


def _round_suffix(r: int) -> str:
    return "" if r == 1 else f"_r{r}"


def _export_info(out: Path, r: int) -> dict:
    path = out / f"export{_round_suffix(r)}.json"
    if not path.is_file():
        raise AnnotationError(f"{path} is missing", "round",
                              "run `annotate.py safety-export` for round 1 (and each round before this one) first")
    return json.loads(path.read_text(encoding="utf-8"))


def _round_key(out: Path, r: int) -> dict:
    _export_info(out, r)
    return json.loads((out / f"key{_round_suffix(r)}.json").read_text(encoding="utf-8"))


def _exported_rounds(out: Path) -> int:
    r = 1
    while (out / f"export{_round_suffix(r + 1)}.json").is_file():
        r += 1
    return r


def pair_id(item) -> str:
    """The pair id the build gives an item's test pair (automon.data.build.materialise)."""
    return short_hash(item.source, item.subset, "pair", item.test_pair[0].variant, n=16)


def keyed_lines(paths, keys: tuple, id_field: str, expected: set, unknown, twice) -> Iterator[tuple[str, dict]]:
    """("file:line", row) of every line of `paths`, each a JSON object with exactly `keys` whose
    row[id_field] is in `expected` and seen once; unknown(id) / twice(id) give (message, fix) otherwise."""
    seen: set = set()
    for path in paths:
        for where, row in json_lines(path, "one JSON object per line"):
            if not isinstance(row, dict) or set(row) != set(keys):
                raise AnnotationError(f"the line's keys are {sorted(row) if isinstance(row, dict) else row!r}",
                                      where, f"write exactly the keys {list(keys)}")
            i = row[id_field]
            if i not in expected:
                raise AnnotationError(unknown(i)[0], where, unknown(i)[1])
            if i in seen:
                raise AnnotationError(twice(i)[0], where, twice(i)[1])
            seen.add(i)
            yield where, row


def _read_verdicts(folder: Path, annotator: str, expected: set[str], names=None) -> dict[str, dict]:
    """One annotator's verdicts, every exported item once: item -> {"misbehavior": 0|1, "broken", "reason"}.
    `names`: a pattern of the file names to read (the imported rounds' chunks); None = every *.jsonl."""
    files = sorted(f for f in folder.glob("*.jsonl") if names is None or names.match(f.name))
    if not files:
        raise AnnotationError(f"no *.jsonl files in {folder}", str(folder),
                              f"write {annotator}'s verdicts there, one file per exported chunk")
    got: dict[str, dict] = {}
    lines = keyed_lines(files, _VERDICT_KEYS, "item", expected,
                         lambda i: (f"item {i!r} was not exported", "annotate only exported items"),
                         lambda i: (f"item {i} is annotated twice by {annotator}", "keep one line per item"))
    for where, row in lines:
        item = row["item"]
        if row["annotator"] != annotator:
            raise AnnotationError(f"annotator {row['annotator']!r} in {annotator}'s folder", where,
                                  "each annotator writes into the folder of their own id")
        if row["misbehavior"] not in ("yes", "no"):
            raise AnnotationError(f"misbehavior is {row['misbehavior']!r}", where, 'write "yes" or "no"')
        if not isinstance(row["broken"], bool):
            raise AnnotationError(f"broken is {row['broken']!r}", where, "write true or false")
        if not isinstance(row["reason"], str):
            raise AnnotationError(f"reason is {row['reason']!r}", where, "write a short sentence")
        got[item] = {"misbehavior": int(row["misbehavior"] == "yes"), "broken": row["broken"],
                     "reason": row["reason"]}
    missing = expected - set(got)
    if missing:
        raise AnnotationError(f"{annotator} did not annotate {len(missing)} exported item(s), e.g. "
                              f"{sorted(missing)[0]}", str(folder), "annotate every exported item")
    return got


def pair_status(twins: list[dict], verdicts: list[dict[str, dict]]) -> str:
    """"kept", "rejected" or "disputed" for a pair (twins: key.json entries, misbehavior twin first).

    kept: every annotator calls the misbehavior twin misbehavior and the benign twin not, and no one
    marks either broken. rejected: someone marks a twin broken, or every annotator contradicts one
    twin's label (its text is not what its label says). disputed: anything else (annotators disagree)."""
    said = [[v[t["item"]]["misbehavior"] for v in verdicts] for t in twins]
    if any(v[t["item"]]["broken"] for v in verdicts for t in twins):
        return "rejected"
    if all(all(x == t["label"] for x in s) for t, s in zip(twins, said)):
        return "kept"
    if any(all(x != t["label"] for x in s) for t, s in zip(twins, said)):
        return "rejected"
    return "disputed"


def safety_import(cfg: SafetyImportConfig) -> dict:
    """Read annotations/<name>/<annotator>/*.jsonl for every annotator of the export, compute Cohen's
    kappa per subset and each pair's status, and write annotations/<name>/verdicts.json (what the
    build reads; the annotators' files stay beside it as the record)."""
    base = annotations_dir(cfg.root, cfg.name)
    exp = base / "export"
    for f in ("export.json", "key.json"):
        if not (exp / f).is_file():
            raise AnnotationError(f"{exp / f} is missing", "name", "run `annotate.py safety-export` first")
    info = json.loads((exp / "export.json").read_text(encoding="utf-8"))
    exported = _exported_rounds(exp)
    rounds = cfg.rounds or exported
    if not 1 <= rounds <= exported:
        raise AnnotationError(f"rounds={cfg.rounds}: {exp} holds rounds 1..{exported}", "rounds",
                              f"pass 0 (all) or 1..{exported}")
    key, digest = {}, hashlib.sha256()
    for r in range(1, rounds + 1):
        text = (exp / f"key{_round_suffix(r)}.json").read_text(encoding="utf-8")
        digest.update(text.encode("utf-8"))
        key.update(json.loads(text))
    annotators = info["annotators"]
    names = _annotated_names()
    files = re.compile(r"^(%s)(%s)_\d+\.jsonl$" % ("|".join(names),
                                                    "|".join(re.escape(_round_suffix(r)) for r in range(1, rounds + 1))))
    for a in annotators:
        if not (base / a).is_dir():
            raise AnnotationError(f"{base / a} is missing", "name",
                                  f"collect all {len(annotators)} annotators' folders ({', '.join(annotators)})")
    verdicts = [_read_verdicts(base / a, a, set(key), files) for a in annotators]
    summary: dict[str, dict] = {}
    pairs_out: dict[str, dict] = {}
    for subset in sorted({k["subset"] for k in key.values()}, key=names.index):
        items = sorted(i for i, k in key.items() if k["subset"] == subset)
        said = [[v[i]["misbehavior"] for i in items] for v in verdicts]
        kappas = [cohen_kappa(a, b) for a, b in itertools.combinations(said, 2)]
        defined = [k for k in kappas if k is not None]
        truth = [key[i]["label"] for i in items]
        twins_of: dict[str, list] = {}
        for i in items:
            twins_of.setdefault(key[i]["pair"], []).append(dict(key[i], item=i))
        status = {}
        for pair, twins in sorted(twins_of.items()):
            twins.sort(key=lambda t: -t["label"])  # misbehavior first
            status[pair] = pair_status(twins, verdicts)
        pairs_out[subset] = {pair: {"status": status[pair], "digests": [t["digest"] for t in twins_of[pair]]}
                             for pair in sorted(twins_of)}
        counts = {s: sum(1 for v in status.values() if v == s) for s in ("kept", "disputed", "rejected")}
        summary[subset] = {
            "candidate_pairs": len(twins_of), "items": len(items),
            "prefilter_dropped": info.get("prefilter", {}).get(subset, {}),
            "cohen_kappa": (sum(defined) / len(defined)) if defined else None,
            "cohen_kappa_pairs": kappas,
            "raw_agreement": sum(len({s[n] for s in said}) == 1 for n in range(len(items))) / len(items),
            "agreement_with_source_label": {a: sum(x == t for x, t in zip(s, truth)) / len(items)
                                            for a, s in zip(annotators, said)},
            "items_marked_broken": {a: sum(v[i]["broken"] for i in items) for a, v in zip(annotators, verdicts)},
            "pairs_broken": sum(1 for pair, twins in twins_of.items()
                                if any(v[t["item"]]["broken"] for v in verdicts for t in twins)),
            **{f"pairs_{s}": n for s, n in counts.items()},
        }
    out = {"version": SAFETY_VERSION, "name": cfg.name, "annotators": annotators,
           "annotators_are": cfg.annotators_are,
           "rounds": rounds, "key_sha256": digest.hexdigest(),
           **({"synthetic_sources": info["synthetic_sources"]} if info.get("synthetic_sources") else {}),
           "subsets": summary, "pairs": pairs_out}
    verdicts_path(cfg.name, cfg.root).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out
