"""OOD detectors against direct computations: Mahalanobis vs numpy/scipy on known Gaussians, kNN vs a
brute-force loop, response perplexity vs the tiny model's own loss."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import mahalanobis as scipy_mahalanobis

from automon.ood import detectors as D


def _spd(d: int, rng) -> np.ndarray:
    a = rng.normal(size=(d, d))
    return a @ a.T + d * np.eye(d)


def test_mahalanobis_without_shrinkage_equals_scipy_with_the_sample_covariance():
    rng = np.random.default_rng(0)
    x = rng.multivariate_normal(np.arange(4.0), _spd(4, rng), size=300)
    g = D.fit_gaussian(x, fit="benign", shrinkage=0.0)
    vi = np.linalg.inv(np.cov(x, rowvar=False))  # ddof=1, as the fit
    q = rng.normal(size=(7, 4)) * 5
    want = [scipy_mahalanobis(r, x.mean(0), vi) ** 2 for r in q]
    assert D.mahalanobis(g, q) == pytest.approx(want, rel=1e-9)


def test_mahalanobis_on_a_known_gaussian_recovers_the_true_distance_and_chi_square_mean():
    rng = np.random.default_rng(1)
    mu, cov = np.array([1.0, -2.0, 0.5]), _spd(3, rng)
    x = rng.multivariate_normal(mu, cov, size=20000)
    g = D.fit_gaussian(x, fit="benign", shrinkage=0.0)
    q = rng.multivariate_normal(mu, cov, size=2000)
    true = np.einsum("ij,jk,ik->i", q - mu, np.linalg.inv(cov), q - mu)
    assert D.mahalanobis(g, q) == pytest.approx(true, rel=0.1, abs=0.1)  # estimation error of 20k samples
    assert D.mahalanobis(g, q).mean() == pytest.approx(3.0, abs=0.15)  # E[chi^2_3] = 3


def test_class_conditional_fit_uses_class_means_a_tied_covariance_and_the_nearest_class():
    rng = np.random.default_rng(2)
    cov = np.diag([1.0, 4.0])
    a = rng.multivariate_normal([0, 0], cov, size=4000)
    b = rng.multivariate_normal([10, 0], cov, size=4000)
    x, y = np.vstack([a, b]), np.r_[np.zeros(4000), np.ones(4000)].astype(int)
    g = D.fit_gaussian(x, y, fit="class", shrinkage=0.0)
    assert g.means == pytest.approx(np.array([[0, 0], [10, 0]]), abs=0.1)
    pooled = np.linalg.inv(((a - a.mean(0)).T @ (a - a.mean(0)) + (b - b.mean(0)).T @ (b - b.mean(0))) / (8000 - 2))
    q = np.array([[1.0, 1.0], [9.0, -2.0]])
    want = [min((r - a.mean(0)) @ pooled @ (r - a.mean(0)), (r - b.mean(0)) @ pooled @ (r - b.mean(0))) for r in q]
    assert D.mahalanobis(g, q) == pytest.approx(want, rel=1e-9)
    # benign-only: the misbehavior class's centre is far, not a second mode
    gb = D.fit_gaussian(x, y, fit="benign", shrinkage=0.0)
    assert D.mahalanobis(gb, q)[1] > 50 > D.mahalanobis(g, q)[1]


def test_shrinkage_moves_the_covariance_to_scaled_identity_and_auto_is_ledoit_wolf():
    from sklearn.covariance import ledoit_wolf

    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 60)) * np.linspace(0.5, 3, 60)  # more dimensions than samples
    g1 = D.fit_gaussian(x, fit="benign", shrinkage=1.0)
    c = np.cov(x, rowvar=False)
    assert g1.precision == pytest.approx(np.eye(60) * 60 / np.trace(c), rel=1e-6)
    ga = D.fit_gaussian(x, fit="benign", shrinkage="auto")
    cov_lw, a_lw = ledoit_wolf(x - x.mean(0), assume_centered=True)
    assert ga.shrinkage == pytest.approx(a_lw) and 0 < ga.shrinkage < 1
    # same shrunk covariance up to the ddof of its empirical part
    want = (1 - a_lw) * c + a_lw * np.trace(c) / 60 * np.eye(60)
    assert np.linalg.inv(ga.precision) == pytest.approx(want, rel=1e-6, abs=1e-9)
    with pytest.raises(ValueError):
        D.fit_gaussian(x, shrinkage=1.5)


def test_knn_distance_equals_a_brute_force_loop():
    rng = np.random.default_rng(4)
    bank, q = rng.normal(size=(50, 8)), rng.normal(size=(13, 8))
    for k, norm in [(1, True), (5, True), (3, False)]:
        b = bank / np.linalg.norm(bank, axis=1, keepdims=True) if norm else bank
        qq = q / np.linalg.norm(q, axis=1, keepdims=True) if norm else q
        want = [np.sort([np.linalg.norm(r - s) for s in b])[k - 1] for r in qq]
        assert D.knn_distance(bank, q, k, normalize=norm, block=4) == pytest.approx(want, rel=1e-7, abs=1e-9)
    assert D.knn_distance(bank, bank[:3], 1) == pytest.approx([0, 0, 0], abs=1e-6)
    with pytest.raises(ValueError):
        D.knn_distance(bank, q, 51)


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval(), tok


def test_response_nll_equals_the_models_own_loss_on_the_response_tokens(tiny_lm):
    import torch

    model, tok = tiny_lm
    reqs = ["Write a function that adds two numbers.", "What is the capital of France? Answer briefly please."]
    resps = ["def add(a, b):\n    return a + b", "Paris."]
    prompts = [D.chat_prefix(tok, r) for r in reqs]
    got = D.response_nll(model, tok, prompts, resps, max_length=512, batch_size=2)  # padded batch
    for p, r, g in zip(prompts, resps, got):
        pi = tok(p, add_special_tokens=False)["input_ids"]
        ri = tok(r, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([pi + ri])
        labels = ids.clone()
        labels[0, :len(pi)] = -100  # HF shifts labels inside: the loss covers exactly the response tokens
        with torch.inference_mode():
            loss = model(input_ids=ids, labels=labels).loss.item()
        assert g == pytest.approx(loss, rel=1e-4)
    assert "Write a function" in prompts[0] and prompts[0] != reqs[0]  # the chat template was applied
    # truncation keeps the response and cuts the prompt from the left
    short = D.response_nll(model, tok, prompts[:1], resps[:1], max_length=len(tok(resps[0])["input_ids"]) + 3)
    assert np.isfinite(short[0]) and short[0] != pytest.approx(got[0], rel=1e-6)


def test_response_nll_reads_the_full_forwards_log_probabilities_to_the_bit(tiny_lm):
    """response_nll runs the LM head only on the positions that predict a response token; those rows
    are the full forward's to the bit, so the NLLs equal ones summed from the full logits over the same
    positions (a prompt far longer than its response: most positions are left out)."""
    import torch

    model, tok = tiny_lm
    reqs = ["Explain, step by step and at length, how a hash map resolves collisions. " * 6, "Capital of France?"]
    resps = ["Chaining.", "Paris, on the Seine; it has been the capital since the tenth century."]
    prompts = [D.chat_prefix(tok, r) for r in reqs]
    got = D.response_nll(model, tok, prompts, resps, max_length=512, batch_size=2)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    seqs = [(tok(p, add_special_tokens=False)["input_ids"], tok(r, add_special_tokens=False)["input_ids"])
            for p, r in zip(prompts, resps)]
    width = max(len(a) + len(b) for a, b in seqs)
    ids = torch.full((2, width), pad)
    mask, target = torch.zeros((2, width), dtype=torch.long), torch.zeros((2, width), dtype=torch.bool)
    for i, (a, b) in enumerate(seqs):
        ids[i, :len(a) + len(b)], mask[i, :len(a) + len(b)] = torch.tensor(a + b), 1
        target[i, len(a):len(a) + len(b)] = True
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()  # every position
    t = target[:, 1:]
    keep = t.any(dim=0).nonzero().squeeze(-1)
    assert len(keep) < width / 2  # the case the change is for
    lp = torch.log_softmax(logits[:, :-1][:, keep], dim=-1).gather(-1, ids[:, 1:][:, keep].unsqueeze(-1)).squeeze(-1)
    want = (-(lp * t[:, keep]).sum(1) / t[:, keep].sum(1)).numpy()
    assert np.array_equal(got, want), (got, want)
