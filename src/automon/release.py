"""automon-bench releases: the benchmark's published definitions, one record each.

A release names the data definition (the wordings and the build logic) and the files a build of it
gives from the recorded sources (docs/data.md "Sources"): the sha256 of test.jsonl and train.jsonl,
and of manifest.json, which is the data hash adapters and evaluations record. A build is a release's
only if its manifest hash is the release's; the dataset card, every evaluation's identity.json and
every report header say which release a build is, or that it is none (a smoke build, other seeds or
caps, changed wordings: numbers on it are not the benchmark's).

How a release is made (docs/data.md "Releases"): a new wordings file (conf/wordings/<v>.yaml, the only
one) and/or a new BUILD_VERSION, a real build from the recorded sources, its manifest recorded under
docs/results (automon-bench-<version>.manifest.json), a Release appended below with the build's three hashes,
and a git tag `bench-<version>` on the commit that builds it. The wordings it supersedes leave the
code: RETIRED_WORDINGS says which commit still builds each one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    wordings: str          # conf/wordings/<wordings>.yaml
    build_version: str     # automon.data.identity.BUILD_VERSION
    test_sha256: str
    train_sha256: str
    manifest_sha256: str   # the data hash
    date: str

    @property
    def title(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def tag(self) -> str:
        return f"bench-{self.version}"

    def cite(self) -> str:
        return (f"{self.title} (git tag `{self.tag}`; test.jsonl sha256 {self.test_sha256[:12]}, data hash "
                f"{self.manifest_sha256[:12]})")


RELEASES = (
    Release(name="automon-bench", version="1.0", wordings="v9", build_version="build-v3",
            test_sha256="1bcdc05f191bed9a98536788f0d9247a47d98b0a6c77ac606b3ac6190da20fa1",
            train_sha256="9387eadc15b425b97e0d966edbf7743bbad00407361c4e0cdcd7adf0a55e8a27",
            manifest_sha256="9eac8acb51de6478a4809b4918f9b278d286476d76e90a62e59b90dd6e6e1f97", date="2026-11-28"),
    # 1.0 with gold evidence on every misbehavior test sample (build-v4; docs/data.md "Gold evidence"): every
    # sample's id, text, label and meta are 1.0's (docs/results/automon-bench-1.1.compare.json)
    Release(name="automon-bench", version="1.1", wordings="v9", build_version="build-v4",
            test_sha256="d8885e3d1a213c8f42b1d3ef1655514b03fa1d322ccd73257b93a142e38abdff",
            train_sha256="b1e5d1fd24220cf4bc71ec05da9029711d762a8311d99a268ba899454a56051e",
            manifest_sha256="8d6ce1f3a54c4debe030daf695bb878a5ae56228a9eecdbd9ec1609db357d172", date="2026-11-29"),
)
CURRENT = RELEASES[-1]

# Wordings released before automon-bench 1.0 and retired from the code with it -> the last commit that
# builds them (byte for byte, as docs/results/build-local-<v>.manifest.json records) and evaluates on them.
RETIRED_AT = "1ff3255a9730"
RETIRED_WORDINGS = {v: RETIRED_AT for v in ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8")}


def release_of(manifest_hash: str) -> Release | None:
    """The release whose build has this data hash (manifest.json's sha256), if any."""
    return next((r for r in RELEASES if r.manifest_sha256 and r.manifest_sha256 == manifest_hash), None)


def release_line(manifest: Mapping, manifest_hash: str) -> str:
    """One line for cards and report headers: the release a build is, or why it is none."""
    r = release_of(manifest_hash)
    if r is not None:
        return r.cite()
    files = manifest.get("files") or {}
    if files.get("test.jsonl") == CURRENT.test_sha256:
        why = "its test split is the release's, the rest of its manifest (training split, config) is not"
    else:
        why = "its test split is not the release's (other sources, config, seed or caps)"
    return f"not a release build: {why}; the current release is {CURRENT.cite()}"


def retired_message(wordings: str) -> str | None:
    """Why a build of `wordings` cannot be built or used here, and the commit that can; None if current."""
    commit = RETIRED_WORDINGS.get(wordings)
    if commit is None:
        return None
    return (f"wordings {wordings} was retired with {CURRENT.title}, whose labels supersede it; its builds, adapters "
            f"and evaluations are reproduced by the commit that last built it: `git checkout {commit}` "
            f"(docs/data.md \"Releases\")")


def _records(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def compare_splits(old_path, new_path, except_fields: tuple[str, ...] = ("evidence",)) -> dict:
    """Two builds' split files field by field: the same ids in the same order, every field but
    `except_fields` equal. Returns the count of samples, of fields changed per name (the excepted
    ones too, for the record) and up to 20 differences in the others ("id field"); no differences
    means the later release keeps every text and label of the earlier."""
    old, new = _records(old_path), _records(new_path)
    changed: dict[str, int] = {}
    differences = []
    if [r["id"] for r in old] != [r["id"] for r in new]:
        differences.append(f"the ids differ ({len(old)} vs {len(new)} samples, or another order)")
    for a, b in zip(old, new):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                changed[key] = changed.get(key, 0) + 1
                if key not in except_fields and len(differences) < 20:
                    differences.append(f"{a.get('id')} {key}")
    digest = [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in (old_path, new_path)]
    return {"old_sha256": digest[0], "new_sha256": digest[1], "samples": len(new),
            "fields_changed": dict(sorted(changed.items())), "except": list(except_fields), "differences": differences}
