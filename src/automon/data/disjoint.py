"""Train/test disjointness: shared source items, identical normalised text, MinHash/LSH near duplicates.

`find_conflicts` is used by the build to drop (or refuse) training samples that touch the test set;
`verify_build` re-reads a finished build from disk and re-runs every check independently of the
build's in-memory state, so a bug in the filter cannot hide behind itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from automon.data.forked import Forked, die_with_parent
from automon.schema import Sample, read_samples

# v2: the request alone is checked too (exact after normalisation, and near duplicates), so a
# training sample cannot carry a test request under another source row (HH-RLHF repeats conversations).
# v3: candidates from LSH bands that miss almost no pair at the threshold, confirmed by the exact
# jaccard (v2 used datasketch's bands and MinHash's estimate: a request pair at 0.87 went through).
DISJOINT_VERSION = "disjoint-v3"
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


_BLOCK_SHINGLES = 4000


def _minhash_chunk(args: tuple[list[str], int, int]) -> np.ndarray:
    """The signatures datasketch's `MinHash.bulk(..., hashfunc=crc32)` gives these texts, computed for
    all of them at once: the same crc32 of each shingle, the same premix and affine permutations
    (taken from a datasketch MinHash), one numpy min-reduction per block of texts instead of numpy
    calls per text, which made up half of the build's disjointness check. A test checks that the
    values equal datasketch's; a datasketch whose scheme is not affine32 is used as it is."""
    from datasketch import MinHash
    from datasketch.minhash import _fmix

    texts, n, num_perm = args
    proto = MinHash(num_perm=num_perm, seed=MINHASH_SEED, hashfunc=_crc32)
    if proto.scheme != "affine32":
        mhs = MinHash.bulk([shingles(t, n) for t in texts], num_perm=num_perm, seed=MINHASH_SEED, hashfunc=_crc32)
        return np.stack([m.hashvalues for m in mhs]) if mhs else np.zeros((0, num_perm), dtype=proto.hashvalues.dtype)
    a, b = proto.permutations
    hv: list[int] = []
    ends = np.empty(len(texts), dtype=np.int64)  # end of each text's shingles in hv
    for i, t in enumerate(texts):
        hv.extend(map(zlib.crc32, shingles(t, n)))  # _crc32, without a Python call per shingle
        ends[i] = len(hv)
    mixed = _fmix(np.array(hv, dtype=np.uint32), 32)
    # permutations x shingles, in blocks of whole texts that stay in cache (about 4,000 shingles x 128
    # permutations x 4 bytes = 2 MB): 15x faster than shingles x permutations or one large block.
    out = np.empty((num_perm, len(texts)), dtype=np.uint32)
    starts = np.concatenate(([0], ends[:-1])) if len(texts) else ends
    a, b = a[:, None], b[:, None]
    first = 0
    while first < len(texts):
        last = max(first + 1, int(np.searchsorted(ends, starts[first] + _BLOCK_SHINGLES, side="right")))
        lo, hi = starts[first], ends[last - 1]
        perm = a * mixed[None, lo:hi] + b  # uint32 arithmetic wraps modulo 2^32, as datasketch's does
        out[:, first:last] = np.minimum.reduceat(perm, starts[first:last] - lo, axis=1)
        first = last
    return np.ascontiguousarray(out.T)


def minhash_signatures(texts: Sequence[str], n: int, num_perm: int, workers: int = 1,
                       chunk: int = 2000, memo: dict | None = None) -> np.ndarray:
    """MinHash signatures (rows) of word n-gram shingles, datasketch's values (`_minhash_chunk`), in parallel.

    `memo` maps sha1(text) -> signature so that re-checking the same texts (the post-write
    verification) does not recompute them; the signature is a pure function of the text.
    """
    memo = {} if memo is None else memo
    keys = [hashlib.sha1(t.encode("utf-8")).digest() + bytes((n, num_perm % 256)) for t in texts]
    todo = sorted({k: i for i, k in enumerate(keys) if k not in memo}.values())
    jobs = [([texts[i] for i in todo[j:j + chunk]], n, num_perm) for j in range(0, len(todo), chunk)]
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),)) as ex:
            parts = list(ex.map(_minhash_chunk, jobs))
    else:
        parts = [_minhash_chunk(j) for j in jobs]
    if parts:
        for i, sig in zip(todo, np.concatenate(parts)):
            memo[keys[i]] = sig
    if not texts:
        return np.zeros((0, num_perm), dtype=np.uint32)
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


MAX_MISS = 1e-4  # the most likely a pair at the threshold may be to never become a candidate


def _lsh_bands(threshold: float, num_perm: int, max_miss: float = MAX_MISS) -> list[tuple[int, int]]:
    """The (start, end) signature columns of each LSH band: b bands of r rows, r as large as allows a
    pair of jaccard `threshold` to share no band with probability (1 - t^r)^b <= `max_miss`.

    Not datasketch MinHashLSH's choice for the threshold (9 bands x 13 rows at 0.8 for 128 permutations),
    which weighs false positives and false negatives alike: it misses 60% of the pairs at jaccard 0.8
    and 31% at 0.85. Here candidates are cheap to confirm exactly, so misses are what to avoid
    (0.8 -> 25 x 5: 5e-5 at 0.8; 6% of pairs at jaccard 0.3 become candidates)."""
    for r in range(num_perm, 0, -1):
        b = num_perm // r
        if (1.0 - threshold ** r) ** b <= max_miss:
            return [(k * r, (k + 1) * r) for k in range(b)]
    raise ValueError(f"no LSH banding of {num_perm} permutations finds pairs at jaccard {threshold} "
                     f"with miss probability <= {max_miss}: raise disjoint.num_perm or the threshold")


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant: folds a band's hash values into one key


def _band_keys(sigs: np.ndarray, bands: list[tuple[int, int]]) -> np.ndarray:
    """(rows, bands) uint64: one key per band of each signature. Equal bands give equal keys; an
    unequal band can collide on a key (2^-64), which is why candidates are confirmed band by band."""
    keys = np.zeros((len(sigs), len(bands)), dtype=np.uint64)
    for j, (start, end) in enumerate(bands):
        k = np.zeros(len(sigs), dtype=np.uint64)
        for c in range(start, end):
            k = (k ^ sigs[:, c]) * _MIX  # wraps modulo 2^64
        keys[:, j] = k
    return keys


def _near_duplicates(test_texts: Sequence[tuple[str, str]], train_texts: Sequence[tuple[str, str]], ngram: int,
                     num_perm: int, threshold: float, workers: int, memo: dict | None) -> dict[str, tuple[str, float]]:
    """train key -> (test id, jaccard) of its most similar test text at or above `threshold`.

    A (train, test) pair is a candidate when one LSH band of their MinHash signatures is equal
    (`_lsh_bands`: a pair at the threshold is missed with probability <= MAX_MISS), and a candidate
    counts when the exact jaccard of the two shingle sets reaches the threshold, not MinHash's estimate
    of it (whose error, about 0.035 at 0.8 with 128 permutations, let pairs at 0.87 through); ties keep
    the smallest test id. The bands are matched with numpy over all rows at once.
    """
    if not test_texts or not train_texts:
        return {}
    bands = _lsh_bands(threshold, num_perm)
    test_sigs = minhash_signatures([t for _, t in test_texts], ngram, num_perm, workers, memo=memo)
    train_sigs = minhash_signatures([t for _, t in train_texts], ngram, num_perm, workers, memo=memo)
    test_keys, train_keys = _band_keys(test_sigs, bands), _band_keys(train_sigs, bands)
    by_band: list[dict[int, list[int]]] = [{} for _ in bands]
    for i, row in enumerate(test_keys.tolist()):
        for j, k in enumerate(row):
            by_band[j].setdefault(k, []).append(i)
    hit = np.stack([np.isin(train_keys[:, j], test_keys[:, j]) for j in range(len(bands))], axis=1)
    test_sets: dict[int, frozenset] = {}
    found = {}
    for r in np.flatnonzero(hit.any(axis=1)).tolist():
        sig = train_sigs[r]
        cands = set()
        for j in np.flatnonzero(hit[r]).tolist():
            start, end = bands[j]
            cands.update(i for i in by_band[j][int(train_keys[r, j])]
                         if np.array_equal(test_sigs[i, start:end], sig[start:end]))
        mine = frozenset(shingles(train_texts[r][1], ngram))
        best, best_j = None, -1.0
        for i in sorted(cands, key=lambda i: test_texts[i][0]):
            if i not in test_sets:
                test_sets[i] = frozenset(shingles(test_texts[i][1], ngram))
            jac = jaccard(mine, test_sets[i])
            if jac >= threshold and jac > best_j:
                best, best_j = test_texts[i][0], jac
        if best is not None:
            found[train_texts[r][0]] = (best, best_j)
    return found


def find_conflicts(train: Sequence[Sample], test: Sequence[Sample], ngram: int = 5, num_perm: int = 128,
                   threshold: float = 0.8, workers: int = 1, memo: dict | None = None) -> ConflictReport:
    """Every (train, test) collision; one entry per train sample (its first, strongest reason):
    a shared source-item key, the same normalised text, the same normalised request, a near-duplicate
    text (request + response), a near-duplicate request.

    Each training sample's conflict depends on it and the test set alone, so with `workers` > 1 a large
    training set is checked in two halves, the second in a forked child; the report is the serial one
    (each kind's conflicts in training order, the kinds in the serial order), and the signatures the
    child computed join `memo`."""
    bands = _lsh_bands(threshold, num_perm)
    params = {"version": DISJOINT_VERSION, "ngram": ngram, "num_perm": num_perm, "threshold": threshold,
              "minhash_seed": MINHASH_SEED, "max_words": MAX_WORDS, "library": "datasketch MinHash", "base_hash": "crc32",
              "lsh_bands": f"{len(bands)} x {bands[0][1] - bands[0][0]} rows", "lsh_max_miss_at_threshold": MAX_MISS,
              "confirm": "exact jaccard of the shingle sets",
              "text": "request + '\\n' + response, lowercased, \\w+ words; and the request alone"}
    params["scheme"] = _minhash_scheme()
    memo = {} if memo is None else memo
    if workers > 1 and len(train) >= _SPLIT_AT:
        half = len(train) // 2
        with Forked(_conflicts_and_memo, train[half:], test, ngram, num_perm, threshold, workers, memo,
                    name="disjointness (second half)") as child:
            first = _conflicts(train[:half], test, ngram, num_perm, threshold, workers, memo)
            (second, learnt), _ = child.result()
        memo.update(learnt)
        phases = [a + b for a, b in zip(first, second)]
    else:
        phases = _conflicts(train, test, ngram, num_perm, threshold, workers, memo)
    return ConflictReport([c for phase in phases for c in phase], params)


_SPLIT_AT = 20_000  # training samples from which find_conflicts checks two halves at once


def _conflicts_and_memo(train, test, ngram, num_perm, threshold, workers, memo) -> tuple[tuple, dict]:
    """_conflicts in a forked child, with the signatures it added to its copy of `memo`."""
    known = set(memo)
    phases = _conflicts(train, test, ngram, num_perm, threshold, workers, memo)
    return phases, {k: v for k, v in memo.items() if k not in known}


def _conflicts(train: Sequence[Sample], test: Sequence[Sample], ngram: int, num_perm: int, threshold: float,
               workers: int, memo: dict) -> tuple[list[Conflict], list[Conflict], list[Conflict]]:
    """find_conflicts' three phases, each in training order: the exact checks (source item, text,
    request), the near-duplicate texts, the near-duplicate requests."""
    exact: list[Conflict] = []
    test_keys: dict[str, str] = {}
    test_hashes: dict[str, str] = {}
    test_requests: dict[str, str] = {}
    for t in test:
        for k in t.meta.get("item_keys", []):
            test_keys.setdefault(k, t.id)
        test_hashes.setdefault(text_hash(t), t.id)
        test_requests.setdefault(request_hash(t), t.id)

    # The training variants of an item share its request: hash each distinct request once.
    req_hash: dict[str, str] = {}
    remaining: list[Sample] = []
    for s in train:
        hit = next((k for k in s.meta.get("item_keys", []) if k in test_keys), None)
        if hit:
            exact.append(Conflict(s.id, test_keys[hit], "source_item", hit))
            continue
        h = text_hash(s)
        if h in test_hashes:
            exact.append(Conflict(s.id, test_hashes[h], "exact_text"))
            continue
        r = req_hash.get(s.request)
        if r is None:
            r = req_hash[s.request] = request_hash(s)
        if r in test_requests:
            exact.append(Conflict(s.id, test_requests[r], "exact_request"))
            continue
        remaining.append(s)

    near_texts: list[Conflict] = []
    near = _near_duplicates([(t.id, sample_text(t)) for t in test], [(s.id, sample_text(s)) for s in remaining],
                            ngram, num_perm, threshold, workers, memo)
    for s in remaining:
        if s.id in near:
            tid, j = near[s.id]
            near_texts.append(Conflict(s.id, tid, "near_duplicate", f"jaccard={j:.3f}"))
    remaining = [s for s in remaining if s.id not in near]
    # The request alone, once per distinct request (training variants of an item share it).
    near_requests: list[Conflict] = []
    test_req = {request_hash(t): (t.id, t.request) for t in test}
    train_req = {req_hash[s.request]: s.request for s in remaining}
    near_req = _near_duplicates(sorted(test_req.values()), sorted(train_req.items()), ngram, num_perm, threshold,
                                workers, memo)
    for s in remaining:
        hit = near_req.get(req_hash[s.request])
        if hit is not None:
            near_requests.append(Conflict(s.id, hit[0], "near_duplicate_request", f"jaccard={hit[1]:.3f}"))
    return exact, near_texts, near_requests


def verify_build(path: str | Path, ngram: int = 5, num_perm: int = 128, threshold: float = 0.8,
                 workers: int = 1, memo: dict | None = None) -> ConflictReport:
    """Re-read a build from disk and re-run every disjointness check (empty report = disjoint)."""
    p = Path(path)
    return find_conflicts(read_samples(p / "train.jsonl"), read_samples(p / "test.jsonl"), ngram, num_perm,
                          threshold, workers, memo)
