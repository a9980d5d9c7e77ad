"""Train/test disjointness: shared source items, identical normalised text, MinHash/LSH near duplicates.

`find_conflicts` is used by the build to drop (or refuse) training samples that touch the test set;
`verify_build` re-reads a finished build from disk and re-runs every check independently of the
build's in-memory state, so a bug in the filter cannot hide behind itself.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from automon.schema import Sample, read_samples

# v2: the request alone is checked too (exact after normalisation, and near duplicates), so a
# training sample cannot carry a test request under another source row (HH-RLHF repeats conversations).
DISJOINT_VERSION = "disjoint-v2"
MINHASH_SEED = 1
MAX_WORDS = 4000  # shingle at most this many words per sample (long code files, long dialogues)
_WORD = re.compile(r"\w+", re.UNICODE)


def normalise(text: str) -> str:
    return " ".join(text.lower().split())  # lowercase, whitespace runs collapsed (C speed)


def sample_text(s: Sample) -> str:
    return s.request + "\n" + s.response


def text_hash(s: Sample) -> str:
    return hashlib.sha256(normalise(sample_text(s)).encode("utf-8")).hexdigest()


def request_hash(s: Sample) -> str:
    """The request as the monitored model saw it, normalised: the identity of a source item whatever
    row or file it came from."""
    return hashlib.sha256(normalise(s.request).encode("utf-8")).hexdigest()


def shingles(text: str, n: int) -> list[bytes]:
    words = _WORD.findall(text.lower())[:MAX_WORDS]
    if len(words) <= n:
        return [" ".join(words).encode("utf-8")]
    return [" ".join(g).encode("utf-8") for g in zip(*(words[i:] for i in range(n)))]


def _crc32(b: bytes) -> int:
    # MinHash applies its own random affine permutations on top of this base hash; crc32 is
    # deterministic across processes and about 2x faster than datasketch's default sha1.
    return zlib.crc32(b)


def _minhash_scheme() -> str:
    from datasketch import MinHash

    return MinHash(num_perm=1, seed=MINHASH_SEED).scheme


def _minhash_chunk(args: tuple[list[str], int, int]) -> np.ndarray:
    from datasketch import MinHash

    texts, n, num_perm = args
    mhs = MinHash.bulk([shingles(t, n) for t in texts], num_perm=num_perm, seed=MINHASH_SEED, hashfunc=_crc32)
    return np.stack([m.hashvalues for m in mhs]) if mhs else np.zeros((0, num_perm), dtype=np.uint64)


def minhash_signatures(texts: Sequence[str], n: int, num_perm: int, workers: int = 1,
                       chunk: int = 2000, memo: dict | None = None) -> np.ndarray:
    """MinHash signatures (rows) of word n-gram shingles, computed with datasketch, in parallel.

    `memo` maps sha1(text) -> signature so that re-checking the same texts (the post-write
    verification) does not recompute them; the signature is a pure function of the text.
    """
    memo = {} if memo is None else memo
    keys = [hashlib.sha1(t.encode("utf-8")).digest() + bytes((n, num_perm % 256)) for t in texts]
    todo = sorted({k: i for i, k in enumerate(keys) if k not in memo}.values())
    jobs = [([texts[i] for i in todo[j:j + chunk]], n, num_perm) for j in range(0, len(todo), chunk)]
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            parts = list(ex.map(_minhash_chunk, jobs))
    else:
        parts = [_minhash_chunk(j) for j in jobs]
    if parts:
        for i, sig in zip(todo, np.concatenate(parts)):
            memo[keys[i]] = sig
    if not texts:
        return np.zeros((0, num_perm), dtype=np.uint64)
    return np.stack([memo[k] for k in keys])


@dataclass
class Conflict:
    train_id: str
    test_id: str
    kind: str  # source_item | exact_text | near_duplicate | exact_request | near_duplicate_request
    detail: str = ""

    def to_dict(self) -> dict:
        return {"train_id": self.train_id, "test_id": self.test_id, "kind": self.kind, "detail": self.detail}


@dataclass
class ConflictReport:
    conflicts: list[Conflict] = field(default_factory=list)
    params: dict = field(default_factory=dict)

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.conflicts:
            out[c.kind] = out.get(c.kind, 0) + 1
        return dict(sorted(out.items()))

    def train_ids(self) -> set[str]:
        return {c.train_id for c in self.conflicts}


def _near_duplicates(test_texts: Sequence[tuple[str, str]], train_texts: Sequence[tuple[str, str]], ngram: int,
                     num_perm: int, threshold: float, workers: int, memo: dict | None) -> dict[str, tuple[str, float]]:
    """train key -> (test id, jaccard) of its most similar test text at or above `threshold` (MinHash
    LSH candidates confirmed by their estimated jaccard; ties keep the smallest test id)."""
    from datasketch import LeanMinHash, MinHashLSH

    if not test_texts or not train_texts:
        return {}
    scheme = _minhash_scheme()
    test_sigs = minhash_signatures([t for _, t in test_texts], ngram, num_perm, workers, memo=memo)
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    by_id = {}
    for (tid, _), sig in zip(test_texts, test_sigs):
        m = LeanMinHash(seed=MINHASH_SEED, hashvalues=sig, scheme=scheme)
        by_id[tid] = m
        lsh.insert(tid, m, check_duplication=False)
    train_sigs = minhash_signatures([t for _, t in train_texts], ngram, num_perm, workers, memo=memo)
    found = {}
    for (key, _), sig in zip(train_texts, train_sigs):
        m = LeanMinHash(seed=MINHASH_SEED, hashvalues=sig, scheme=scheme)
        best, best_j = None, -1.0
        # sorted: query() returns a set whose order follows the process's hash seed, and ties in
        # jaccard keep the first candidate, so the manifest's examples must not depend on it.
        for tid in sorted(lsh.query(m)):
            j = m.jaccard(by_id[tid])  # LSH candidates can be false positives: confirm
            if j >= threshold and j > best_j:
                best, best_j = tid, j
        if best is not None:
            found[key] = (best, best_j)
    return found


def find_conflicts(train: Sequence[Sample], test: Sequence[Sample], ngram: int = 5, num_perm: int = 128,
                   threshold: float = 0.8, workers: int = 1, memo: dict | None = None) -> ConflictReport:
    """Every (train, test) collision; one entry per train sample (its first, strongest reason):
    a shared source-item key, the same normalised text, the same normalised request, a near-duplicate
    text (request + response), a near-duplicate request."""
    params = {"version": DISJOINT_VERSION, "ngram": ngram, "num_perm": num_perm, "threshold": threshold,
              "minhash_seed": MINHASH_SEED, "max_words": MAX_WORDS, "library": "datasketch MinHashLSH", "base_hash": "crc32",
              "text": "request + '\\n' + response, lowercased, \\w+ words; and the request alone"}
    params["scheme"] = _minhash_scheme()
    report = ConflictReport(params=params)
    test_keys: dict[str, str] = {}
    test_hashes: dict[str, str] = {}
    test_requests: dict[str, str] = {}
    for t in test:
        for k in t.meta.get("item_keys", []):
            test_keys.setdefault(k, t.id)
        test_hashes.setdefault(text_hash(t), t.id)
        test_requests.setdefault(request_hash(t), t.id)

    remaining: list[Sample] = []
    for s in train:
        hit = next((k for k in s.meta.get("item_keys", []) if k in test_keys), None)
        if hit:
            report.conflicts.append(Conflict(s.id, test_keys[hit], "source_item", hit))
            continue
        h = text_hash(s)
        if h in test_hashes:
            report.conflicts.append(Conflict(s.id, test_hashes[h], "exact_text"))
            continue
        r = request_hash(s)
        if r in test_requests:
            report.conflicts.append(Conflict(s.id, test_requests[r], "exact_request"))
            continue
        remaining.append(s)

    near = _near_duplicates([(t.id, sample_text(t)) for t in test], [(s.id, sample_text(s)) for s in remaining],
                            ngram, num_perm, threshold, workers, memo)
    for s in remaining:
        if s.id in near:
            tid, j = near[s.id]
            report.conflicts.append(Conflict(s.id, tid, "near_duplicate", f"jaccard~{j:.3f}"))
    remaining = [s for s in remaining if s.id not in near]
    # The request alone, once per distinct request (training variants of an item share it).
    test_req = {request_hash(t): (t.id, t.request) for t in test}
    train_req = {request_hash(s): s.request for s in remaining}
    near_req = _near_duplicates(sorted(test_req.values()), sorted(train_req.items()), ngram, num_perm, threshold,
                                workers, memo)
    for s in remaining:
        hit = near_req.get(request_hash(s))
        if hit is not None:
            report.conflicts.append(Conflict(s.id, hit[0], "near_duplicate_request", f"jaccard~{hit[1]:.3f}"))
    return report


def verify_build(path: str | Path, ngram: int = 5, num_perm: int = 128, threshold: float = 0.8,
                 workers: int = 1, memo: dict | None = None) -> ConflictReport:
    """Re-read a build from disk and re-run every disjointness check (empty report = disjoint)."""
    p = Path(path)
    return find_conflicts(read_samples(p / "train.jsonl"), read_samples(p / "test.jsonl"), ngram, num_perm,
                          threshold, workers, memo)
