"""automon.data.disjoint: the batched MinHash and the numpy LSH give exactly what datasketch gives, the
near-duplicate check finds exactly the pairs an all-pairs exact jaccard finds, and the post-write
verification (a forked process) catches what the build's filter let through."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from automon.data import disjoint
from automon.data.disjoint import (MINHASH_SEED, _crc32, _lsh_bands, _minhash_chunk, _near_duplicates, jaccard,
                                   minhash_signatures, shingles)


def _texts(n: int, seed: int = 0) -> list[str]:
    """Texts that share phrases (so that some pairs are near duplicates) with the odd cases mixed in."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(300)] + ["Ünïcode", "naïve", "x_y", "42", "déjà"]
    base = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 120))) for _ in range(n)]
    out = []
    for i, t in enumerate(base):
        words = t.split()
        if i % 3 == 0 and words:  # a near copy of the previous text
            prev = (out[-1] if out else t).split()
            words = prev[:]
            for _ in range(rng.randint(0, 3)):
                words[rng.randrange(len(words))] = rng.choice(vocab)
        out.append(" ".join(words))
    return out + ["", "  ", "one", "a b c d e", "a b c d e f", " ".join(["rep"] * 5000), "Tabs\tand\nnew lines!"]


@pytest.mark.parametrize("ngram", [1, 5])
def test_batched_minhash_equals_datasketch(ngram):
    from datasketch import MinHash

    texts = _texts(400)
    want = np.stack([m.hashvalues for m in MinHash.bulk([shingles(t, ngram) for t in texts], num_perm=128,
                                                        seed=MINHASH_SEED, hashfunc=_crc32)])
    got = _minhash_chunk((texts, ngram, 128))
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_signatures_are_the_same_in_parallel_and_from_the_memo():
    texts = _texts(300, seed=1)
    serial = minhash_signatures(texts, 5, 64, workers=1, chunk=50)
    memo: dict = {}
    parallel = minhash_signatures(texts, 5, 64, workers=2, chunk=50, memo=memo)
    assert np.array_equal(serial, parallel) and len(memo) == len(set(texts))
    assert np.array_equal(minhash_signatures(texts[::-1], 5, 64, memo=memo), serial[::-1])


def _datasketch_near_duplicates(test_texts, train_texts, ngram, num_perm, threshold, bands=None):
    """One datasketch MinHashLSH query per training text; candidates confirmed by the exact jaccard, or
    (bands=None) datasketch's own bands for the threshold confirmed by MinHash's estimate, as disjoint-v2
    did."""
    from datasketch import LeanMinHash, MinHashLSH

    scheme = disjoint._minhash_scheme()
    if bands is None:
        lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    else:
        lsh = MinHashLSH(num_perm=num_perm, params=(len(bands), bands[0][1] - bands[0][0]))
    by_id, text = {}, dict(test_texts)
    for (tid, _), sig in zip(test_texts, minhash_signatures([t for _, t in test_texts], ngram, num_perm)):
        by_id[tid] = LeanMinHash(seed=MINHASH_SEED, hashvalues=sig, scheme=scheme)
        lsh.insert(tid, by_id[tid])
    found = {}
    for (key, train_text), sig in zip(train_texts, minhash_signatures([t for _, t in train_texts], ngram, num_perm)):
        m = LeanMinHash(seed=MINHASH_SEED, hashvalues=sig, scheme=scheme)
        best, best_j = None, -1.0
        for tid in sorted(lsh.query(m)):
            if bands is None:
                j = m.jaccard(by_id[tid])
            else:
                j = jaccard(frozenset(shingles(train_text, ngram)), frozenset(shingles(text[tid], ngram)))
            if j >= threshold and j > best_j:
                best, best_j = tid, j
        if best is not None:
            found[key] = (best, best_j)
    return found


def _exact_near_duplicates(test_texts, train_texts, ngram, threshold):
    """Every pair, exact jaccard: what the check should find."""
    test_sets = [(tid, frozenset(shingles(t, ngram))) for tid, t in sorted(test_texts)]
    found = {}
    for key, t in train_texts:
        mine = frozenset(shingles(t, ngram))
        best, best_j = None, -1.0
        for tid, theirs in test_sets:
            j = jaccard(mine, theirs)
            if j >= threshold and j > best_j:
                best, best_j = tid, j
        if best is not None:
            found[key] = (best, best_j)
    return found


def _split(seed: int):
    texts = _texts(600, seed=seed)
    return [(f"t{i:03d}", t) for i, t in enumerate(texts[::2])], [(f"r{i:03d}", t) for i, t in enumerate(texts[1::2])]


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_numpy_banding_finds_what_datasketch_lsh_finds(threshold):
    test, train = _split(2)
    got = _near_duplicates(test, train, 3, 128, threshold, workers=1, memo=None)
    want = _datasketch_near_duplicates(test, train, 3, 128, threshold, bands=_lsh_bands(threshold, 128))
    assert got == want and len(got) >= 20, len(got)  # planted near copies: the case under test occurs


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_the_check_finds_every_pair_at_the_threshold(threshold):
    """Against all pairs, exactly: nothing at or above the threshold is missed, nothing under it is
    counted. datasketch's own bands and MinHash's estimate (disjoint-v2) get some of it wrong."""
    test, train = _split(3)
    exact = _exact_near_duplicates(test, train, 3, threshold)
    assert _near_duplicates(test, train, 3, 128, threshold, workers=1, memo=None) == exact and len(exact) >= 20
    assert _datasketch_near_duplicates(test, train, 3, 128, threshold) != exact


def test_lsh_bands_keep_misses_rare():
    for threshold in (0.5, 0.8, 0.9):
        bands = _lsh_bands(threshold, 128)
        b, r = len(bands), bands[0][1] - bands[0][0]
        assert b * r <= 128 and bands[-1][1] == b * r
        assert (1 - threshold ** r) ** b <= disjoint.MAX_MISS < (1 - threshold ** (r + 1)) ** (128 // (r + 1))
    assert [len(_lsh_bands(0.8, 128)), _lsh_bands(0.8, 128)[0][1]] == [25, 5]
    with pytest.raises(ValueError, match="num_perm"):
        _lsh_bands(0.05, 8)


def test_post_write_verification_catches_what_the_filter_missed(tmp_path, monkeypatch):
    """A training sample that repeats a test sample reaches the written files (as a bug in the filter
    or in writing would let it): the forked re-check of the files catches it and nothing is published."""
    from automon.data import build, write
    from automon.sources.synthetic import write_synthetic_root
    from support import SMALL_TEST, build_cfg

    real_write = write.write_sample_files

    def write_with_leak(d, train, test):
        leak = replace(train[0], id=train[0].id + "-leak", request=test[0].request, response=test[0].response)
        return real_write(d, train + [leak], test)

    monkeypatch.setattr(write, "write_sample_files", write_with_leak)
    synth_root, out = write_synthetic_root(tmp_path / "raw", n=40), tmp_path / "b"
    with pytest.raises(build.BuildError, match="post-write disjointness check failed.*exact_text"):
        build.run_build(build_cfg([f"sources.root={synth_root}", f"out={out}", *SMALL_TEST]))
    assert not out.exists()


def test_the_warm_up_fills_the_memo_and_stops_when_told(tmp_path):
    """While sg_code runs, the build computes the other subsets' signatures (warm_minhash): every text
    and request the check will need, chunk by chunk, stopping as soon as the recipe is done."""
    from automon.data.context import warm_minhash
    from automon.data.recipes.base import Draft, Item
    from support import build_cfg

    d = build_cfg([]).disjoint
    texts = _texts(60, seed=3)
    items = {"syco_qa": [Item((f"k{i}",), "syco_qa", f"s:{i}", (Draft(f"q{i} " + t, "yes " + t, 1), Draft(f"q{i} " + t, "no", 0)),
                              [Draft(f"q{i} " + t, "maybe " + t, 1)]) for i, t in enumerate(texts)]}
    memo: dict = {}
    warm_minhash(items, d, memo, finished=lambda: False, chunk=25)
    drafts = [dr for its in items.values() for it in its for dr in (*it.test_pair, *it.train)]
    wanted = {disjoint.sample_text(dr) for dr in drafts} | {dr.request for dr in drafts}
    assert len(memo) == len(wanted)
    assert np.array_equal(minhash_signatures(sorted(wanted), d.ngram, d.num_perm, memo=memo),
                          minhash_signatures(sorted(wanted), d.ngram, d.num_perm))
    calls = iter([False, True])
    memo = {}
    warm_minhash(items, d, memo, finished=lambda: next(calls), chunk=25)
    assert len(memo) == 25  # one chunk, then it stopped


def test_two_halves_in_parallel_report_what_one_pass_reports(monkeypatch):
    """find_conflicts with workers > 1 checks a large training set in two halves (the second in a forked
    child): the same conflicts in the same order (each kind in training order, the kinds in the serial
    order), and the signatures the child computed join the memo."""
    from automon.schema import Sample

    texts = _texts(240, seed=5)

    def sample(i: int, split: str, request: str, response: str, keys=()) -> Sample:
        return Sample(id=f"{split}{i}", pair_id=None, split=split, category="safety", task="qa", subset="safety_qa",
                      source=f"s:{i}", request=request, response=response, label=i % 2,
                      meta={"item_keys": list(keys)})

    test = [sample(i, "test", f"question {i} " + texts[i], texts[i + 1], keys=[f"k{i}"]) for i in range(0, 60, 2)]
    train = []
    for i, t in enumerate(texts):
        kind = i % 6  # every kind of conflict spread over both halves, and clean samples between them
        target = test[i % len(test)]
        if kind == 0:
            train.append(sample(i, "train", "other " + t, t, keys=[target.meta["item_keys"][0]]))
        elif kind == 1:
            train.append(sample(i, "train", target.request.upper(), target.response))
        elif kind == 2:
            train.append(sample(i, "train", "  " + target.request, "a different answer " + t))
        elif kind == 3:
            train.append(sample(i, "train", target.request + " extra", target.response))
        else:
            train.append(sample(i, "train", f"unrelated {i} " + t, t))
    serial = disjoint.find_conflicts(train, test, workers=1)
    assert {c.kind for c in serial.conflicts} >= {"source_item", "exact_text", "exact_request"}
    assert any(c.kind.startswith("near_duplicate") for c in serial.conflicts)
    monkeypatch.setattr(disjoint, "_SPLIT_AT", 10)
    memo: dict = {}
    split = disjoint.find_conflicts(train, test, workers=2, memo=memo)
    assert [c.to_dict() for c in split.conflicts] == [c.to_dict() for c in serial.conflicts]
    assert split.params == serial.params
    halves = [disjoint.sample_text(s) for s in train[len(train) // 2:]]
    assert np.array_equal(minhash_signatures(halves, 5, 128, memo=memo), minhash_signatures(halves, 5, 128))
    assert len(memo) >= len(set(halves))  # the child's signatures came back
