"""An independent near-duplicate check of train against test: request word 5-gram
Jaccard >= 0.7 between any training request and any test request.

Independent of src/automon/data/disjoint.py on purpose (its own shingles, hash family, banding and
threshold: the build's filter runs at 0.8 on datasketch signatures): candidates from MinHash LSH
bands tuned to miss almost no pair at 0.7, each confirmed by the exact Jaccard of the shingle sets.
The real-data test reads the default build (HH-RLHF conversations that open alike and MMLU
questions that share a passage are one source item).
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pytest

from support import needs_raw

NGRAM, THRESHOLD = 5, 0.7
# 42 bands of 3 rows: a pair at jaccard 0.7 shares no band with probability (1 - 0.7^3)^42 = 2e-8.
BANDS, ROWS = 42, 3
_WORD = re.compile(r"\w+")
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def word_shingles(text: str, n: int = NGRAM) -> frozenset[int]:
    """64-bit hashes of the lowercased word n-grams (a text of n words or fewer: one shingle).
    Python's string hash: stable within the process, which is all the check needs."""
    w = _WORD.findall(text.lower())
    grams = [" ".join(w)] if len(w) <= n else [" ".join(w[i:i + n]) for i in range(len(w) - n + 1)]
    return frozenset(hash(g) & 0xFFFFFFFFFFFFFFFF for g in grams)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


_SEEDS = _splitmix(np.arange(1, BANDS * ROWS + 1, dtype=np.uint64) * np.uint64(7919))


def signature(sh: frozenset[int]) -> np.ndarray:
    """MinHash: per permutation seed s, the least splitmix64(h ^ s) over the shingles h."""
    h = np.fromiter(sh, dtype=np.uint64, count=len(sh))
    return _splitmix(h[None, :] ^ _SEEDS[:, None]).min(axis=1)


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b)


def cross_pairs(train: Sequence[str], test: Sequence[str], threshold: float = THRESHOLD) -> list[tuple[int, int, float]]:
    """(train index, test index, jaccard) of every train/test text pair at or above `threshold`, over
    the distinct texts (a text repeated is found once per index)."""
    test_sh = [word_shingles(t) for t in test]
    buckets: dict[tuple[int, bytes], list[int]] = {}
    for j, sh in enumerate(test_sh):
        sig = signature(sh)
        for b in range(BANDS):
            buckets.setdefault((b, sig[b * ROWS:(b + 1) * ROWS].tobytes()), []).append(j)
    out = []
    memo: dict[str, frozenset] = {}
    for i, text in enumerate(train):
        sh = memo.get(text)
        if sh is None:
            sh = memo[text] = word_shingles(text)
        sig = signature(sh)
        cands = set()
        for b in range(BANDS):
            cands.update(buckets.get((b, sig[b * ROWS:(b + 1) * ROWS].tobytes()), ()))
        for j in sorted(cands):
            jac = jaccard(sh, test_sh[j])
            if jac >= threshold:
                out.append((i, j, jac))
    return out


def _words(k: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(k))


def test_cross_pairs_finds_every_planted_near_duplicate_and_nothing_else():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(5000)]
    test = [" ".join(rng.choice(vocab, 120)) for _ in range(60)]
    train = [" ".join(rng.choice(vocab, 120)) for _ in range(300)]  # unrelated
    planted = {}
    for j in range(0, 60, 3):  # a test text with its last few words changed: jaccard 0.7-0.95
        words = test[j].split()
        cut = int(rng.integers(2, 14))
        train.append(" ".join(words[:-cut] + [f"x{j}_{c}" for c in range(cut)]))
        planted[len(train) - 1] = j
    # Below the threshold: half the words shared (the shared-template case: a long common tail).
    train.append(" ".join(test[1].split()[:60]) + " " + _words(60, "y"))
    found = cross_pairs(train, test)
    exact = [(i, j) for i in range(len(train)) for j in range(len(test))
             if jaccard(word_shingles(train[i]), word_shingles(test[j])) >= THRESHOLD]
    assert sorted((i, j) for i, j, _ in found) == sorted(exact) == sorted(planted.items())
    assert all(THRESHOLD <= jac < 1.0 for *_, jac in found)
    # Case, punctuation and whitespace do not hide a copy; a text of fewer than 5 words is one shingle.
    assert cross_pairs(["Human: How do I pick a LOCK?!", "hi there"], ["human how   do i pick a lock", "hi"]) == \
        [(0, 0, 1.0)]


@needs_raw
@pytest.mark.realdata
def test_no_train_request_nearly_repeats_a_test_request(real_build):
    test = real_build.samples("test")
    train = real_build.samples("train")
    test_req = sorted({t.request for t in test})
    train_req = sorted({s.request for s in train})
    pairs = cross_pairs(train_req, test_req)
    shown = [(round(j, 3), train_req[a][:80], test_req[b][:80]) for a, b, j in pairs[:5]]
    assert not pairs, f"{len(pairs)} train/test request pairs at word 5-gram jaccard >= {THRESHOLD}: {shown}"
