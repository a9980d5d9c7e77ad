"""OOD detector scores as pure functions: higher = further from the in-distribution samples.

- Mahalanobis (Lee et al. 2018, as MOOD uses it): a Gaussian fitted on in-distribution features, either
  one per class with a tied covariance (`class`: the score is the distance to the nearest class mean)
  or on benign samples only (`benign`). The covariance is shrunk towards a scaled identity,
  (1-a)·S + a·(tr S/d)·I, because pooled hidden states have more dimensions than a capped training
  subsample has samples; `a="auto"` takes the Ledoit-Wolf estimate.
- kNN (Sun et al. 2022): Euclidean distance to the k-th nearest in-distribution feature, after L2
  normalisation.
- Perplexity: the mean negative log-likelihood of the response tokens given the rendered request
  (log-perplexity; monotone in perplexity, so it ranks samples identically and stays finite).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

DETECTORS_VERSION = "ood_detectors_v1"  # bump when a score's definition changes
# How response_nll computes: v2 runs the LM head on the scored positions only, which changes the mean
# NLL in the last bit (the sum has fewer zero terms), so perplexities cached by v1 are not reused.
NLL_VERSION = "response-positions-v2"


@dataclass(frozen=True)
class Gaussian:
    means: np.ndarray       # (k, d): one row per fitted class
    precision: np.ndarray   # (d, d): inverse of the shrunk tied covariance
    shrinkage: float


def shrunk_covariance(centered: np.ndarray, dof: int, shrinkage: float | str) -> tuple[np.ndarray, float]:
    """Covariance of already-centred rows (divided by `dof`), shrunk towards (tr/d)·I."""
    d = centered.shape[1]
    cov = centered.T @ centered / max(dof, 1)
    if shrinkage == "auto":
        from sklearn.covariance import ledoit_wolf_shrinkage

        a = float(ledoit_wolf_shrinkage(centered, assume_centered=True))
    else:
        a = float(shrinkage)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"shrinkage must lie in [0, 1] or be 'auto', got {shrinkage!r}")
    target = np.trace(cov) / d
    return (1.0 - a) * cov + a * target * np.eye(d), a


def fit_gaussian(x: np.ndarray, labels: Sequence[int] | None = None, *, fit: str = "class",
                 shrinkage: float | str = "auto") -> Gaussian:
    """`fit="class"`: a mean per label and the pooled within-class covariance; `fit="benign"`: mean and
    covariance of the label-0 rows only (all rows when `labels` is None)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.zeros(len(x), dtype=int) if labels is None else np.asarray(labels, dtype=int)
    if fit == "benign":
        x, y = x[y == 0], y[y == 0]
    elif fit != "class":
        raise ValueError(f"fit must be 'class' or 'benign', got {fit!r}")
    classes = sorted(set(y.tolist()))
    if len(x) < 2:
        raise ValueError(f"a Gaussian needs at least 2 in-distribution samples, got {len(x)}")
    means = np.stack([x[y == c].mean(0) for c in classes])
    centered = x - means[np.searchsorted(classes, y)]
    cov, a = shrunk_covariance(centered, len(x) - len(classes), shrinkage)
    # pinv: with a = 0 and fewer samples than dimensions the covariance is singular
    return Gaussian(means, np.linalg.pinv(cov, hermitian=True), a)


def mahalanobis(g: Gaussian, x: np.ndarray) -> np.ndarray:
    """Squared Mahalanobis distance of each row to the nearest fitted mean."""
    x = np.asarray(x, dtype=np.float64)
    d = np.stack([np.einsum("ij,jk,ik->i", x - m, g.precision, x - m) for m in g.means])
    return d.min(0)


def knn_distance(bank: np.ndarray, x: np.ndarray, k: int = 1, normalize: bool = True,
                 block: int = 1024) -> np.ndarray:
    """Distance of each row of `x` to its k-th nearest row of `bank` (in-distribution features)."""
    bank = np.asarray(bank, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    if not 1 <= k <= len(bank):
        raise ValueError(f"k={k} must lie in [1, {len(bank)}] (the in-distribution bank's size)")
    if normalize:
        bank = bank / np.maximum(np.linalg.norm(bank, axis=1, keepdims=True), 1e-12)
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    b2 = (bank ** 2).sum(1)
    out = np.empty(len(x))
    for s in range(0, len(x), block):  # blocks bound the (n, bank) distance matrix's memory
        xb = x[s:s + block]
        d2 = np.maximum((xb ** 2).sum(1)[:, None] + b2[None, :] - 2 * xb @ bank.T, 0.0)
        out[s:s + block] = np.sqrt(np.partition(d2, k - 1, axis=1)[:, k - 1])
    return out


# ---------------------------------------------------------------- perplexity

def chat_prefix(tokenizer: Any, request: str) -> str:
    """The monitored conversation up to where the response starts: the request as a user turn under
    the model's chat template, with the assistant turn opened."""
    msgs = [{"role": "user", "content": request}]
    try:  # Qwen3-style templates: no thinking block, as the monitored responses have none
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    except TypeError:
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def response_nll(model: Any, tokenizer: Any, prompts: Sequence[str], responses: Sequence[str],
                 max_length: int = 512, batch_size: int = 4) -> np.ndarray:
    """Mean negative log-likelihood (nats per token) of each response's tokens given its prompt.

    Prompt and response are tokenized apart (no special tokens added) and concatenated, so the scored
    tokens are exactly the response's. Over `max_length` tokens the prompt is cut from the left and then,
    if it is still too long, the response from the right (the response's start is always scored)."""
    import torch

    if len(prompts) != len(responses):
        raise ValueError("prompts and responses differ in length")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = np.empty(len(prompts))
    seqs = []
    for p, r in zip(prompts, responses):
        pi = tokenizer(p, add_special_tokens=False)["input_ids"]
        ri = tokenizer(r, add_special_tokens=False)["input_ids"][:max_length - 1]
        pi = pi[-(max_length - len(ri)):] if pi else pi
        if not pi:  # the first response token needs a context token to be predicted from
            pi = [tokenizer.bos_token_id if tokenizer.bos_token_id is not None else pad]
            ri = ri[:max_length - 1]
        seqs.append((pi, ri))
    device = next(model.parameters()).device
    for s in range(0, len(seqs), batch_size):
        chunk = seqs[s:s + batch_size]
        width = max(len(a) + len(b) for a, b in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        target = torch.zeros((len(chunk), width), dtype=torch.bool)  # tokens whose NLL counts
        for i, (a, b) in enumerate(chunk):
            n = len(a) + len(b)
            ids[i, :n] = torch.tensor(a + b)
            mask[i, :n] = 1
            target[i, len(a):n] = True
        # The LM head runs only on the positions that predict a response token in some row (as the
        # training loss does): the request's positions would add to a (batch, width, vocab) float
        # tensor that nothing reads (Qwen3: 4 x 512 x 152k = 1.2 GB at the defaults, and again for its
        # log-softmax). The kept rows are the full forward's to the bit (tests/ood/test_detectors.py).
        t = target[:, 1:]
        keep = t.any(dim=0).nonzero().squeeze(-1)
        with torch.inference_mode():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                           logits_to_keep=keep.to(device)).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        tok_lp = logp.gather(-1, ids[:, 1:][:, keep].to(device).unsqueeze(-1)).squeeze(-1)
        t = t[:, keep].to(device)
        nll = -(tok_lp * t).sum(1) / t.sum(1).clamp(min=1)
        out[s:s + len(chunk)] = nll.cpu().numpy()
    return out
