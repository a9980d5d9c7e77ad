"""The shortcut audit's panel: surface baselines that see only the RESPONSE, in one registry.

Each member turns response texts into features for a logistic regression (audit.py fits and scores
it). Adding a member is one entry in MEMBERS; the manifest keys, the card's columns, the plot's bars,
the exceed check and the hard subset's report follow from it.

- word:   TF-IDF over word 1-2 grams, fitted on the subset's training split, scored on its test split;
- char:   TF-IDF over character 3-5 grams (char_wb), the same way (`audit.member_caps.char` training
          samples per label; long responses cut to head + tail, `audit.char_max_chars`);
- minilm: the mean-pooled all-MiniLM-L6-v2 sentence embedding (head + tail of the response,
          `audit.minilm_max_length` tokens) + standardised LR, scored by pair-grouped k-fold cross-
          validation on the test split itself, at most `audit.minilm_pairs` seeded pairs per subset:
          encoding training responses too would cost minutes on a CPU. Cached by the texts' hash;
- length: log length in characters and words, fitted on the training split;
- format: formatting and structure only (line counts, indentation, list markers, punctuation and
          character-class shares), standardised;
- comments: the comments of a program alone, word TF-IDF (the check that a code label is not written
          in its comments). format and comments are not in the build's default `audit.members`: the
          safety subsets' artifact report (automon.data.safety_report) runs them with length.

Besides the members: `ngram_z`, a z-test per word 1-2 gram of the test responses (is p(misbehavior |
the n-gram occurs) different from the split's 1/2?) listing the n-grams that still carry a label; and
`aflite`, adversarial filtering of the test split on whole pairs (Le Bras et al. 2020): pairs that
adversaries of two families predict from held-out splits are removed; audit.py scores the pairs left
with the members held out of the filter.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from automon.data.recipes.safety_filters import comments_of
from automon.models.tiny import default_cache_dir
from automon.probes.features import minilm_dir

log = logging.getLogger(__name__)

EMBEDDING_VERSION = "audit_minilm_v1"  # bump when the embedding text, truncation or pooling changes
TRAIN, TEST_CV = "training split", "test-split CV"


@dataclass(frozen=True)
class Member:
    """One baseline of the panel. featurize(train_texts, test_texts, opts) -> (X_train, X_test,
    feature names or None); the features are fitted on train_texts only (no labels). `fit`: where its
    regression learns (TRAIN: the subset's capped training split; TEST_CV: pair-grouped folds of the
    test split); `scale`: standardise the features before the LR."""
    description: str
    featurize: Callable[[Sequence[str], Sequence[str], dict], tuple]
    fit: str = TRAIN
    scale: bool = False


def import_sklearn() -> None:
    """Import the scikit-learn modules the members use (seconds on 2 CPU cores) in the process that is
    about to fork the audit's child, which then inherits them; imported after the fork, both the
    child and this process paid for the same import."""
    import sklearn.feature_extraction.text  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.pipeline  # noqa: F401
    import sklearn.preprocessing  # noqa: F401


def _tfidf(analyzer: str, ngrams: tuple[int, int]) -> Callable:
    def featurize(train: Sequence[str], test: Sequence[str], opts: dict) -> tuple:
        from sklearn.feature_extraction.text import TfidfVectorizer

        # Long responses are cut to head + tail for the char member (opts["max_chars"]): the character
        # vocabulary of a few thousand long programs is what makes it slow, not what makes it accurate.
        cut = opts.get("max_chars")
        vec = TfidfVectorizer(analyzer=analyzer, ngram_range=ngrams, min_df=opts.get("min_df", 2), sublinear_tf=True,
                              max_features=opts.get("max_features", 100_000))
        xtr = vec.fit_transform([head_tail(t, cut) for t in train] if cut else list(train))
        xte = vec.transform([head_tail(t, cut) for t in test] if cut else list(test)) if len(test) else None
        return xtr, xte, vec.get_feature_names_out()
    return featurize


def _length(train: Sequence[str], test: Sequence[str], _: dict) -> tuple:
    def f(texts: Sequence[str]) -> np.ndarray:
        return np.array([[math.log1p(len(t)), math.log1p(len(t.split()))] for t in texts]).reshape(-1, 2)
    return f(train), f(test), None


_FORMAT_NAMES = ("log chars", "log lines", "blank line share", "mean line length", "max indent", "mean indent",
                 "list lines", "question marks", "exclamations", "quotes", "brackets", "braces and semicolons",
                 "digits", "upper case", "urls", "ends with punctuation")


def _format(train: Sequence[str], test: Sequence[str], _: dict) -> tuple:
    """Formatting and structure only, no words: lines, indentation, list markers, punctuation and
    character-class shares (what a reply or a function looks like, not what it says)."""
    import re

    def row(t: str) -> list[float]:
        lines = t.split("\n") or [""]
        n = max(len(t), 1)
        indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()] or [0]
        return [math.log1p(len(t)), math.log1p(len(lines)), sum(not ln.strip() for ln in lines) / len(lines),
                sum(map(len, lines)) / len(lines), float(max(indents)), sum(indents) / len(indents),
                sum(bool(re.match(r"\s*([-*\u2022]|\d+[.)])\s", ln)) for ln in lines) / len(lines),
                t.count("?") / n * 100, t.count("!") / n * 100, sum(t.count(q) for q in "\"'\u201c\u201d") / n * 100,
                sum(t.count(b) for b in "()[]") / n * 100, sum(t.count(b) for b in "{};") / n * 100,
                sum(c.isdigit() for c in t) / n, sum(c.isupper() for c in t) / n, float("http" in t),
                float(t.rstrip()[-1:] in ".!?)\"'")]
    f = lambda texts: np.array([row(t) for t in texts], dtype=float).reshape(-1, len(_FORMAT_NAMES))  # noqa: E731
    return f(train), f(test), None


def code_comments(text: str) -> str:
    """The comments of a program, joined (C-like when it has braces and semicolons, else Python)."""
    lang = "C" if text.count(";") and text.count("{") else "Python"
    return comments_of(text, lang)


def _comments(train: Sequence[str], test: Sequence[str], opts: dict) -> tuple:
    """Word 1-2 gram TF-IDF of the code's comments alone (an empty comment text is one token)."""
    mark = " nocomment "
    tr = [code_comments(t) or mark for t in train]
    te = [code_comments(t) or mark for t in test]
    return _tfidf("word", (1, 2))(tr, te, {**opts, "min_df": 1})


def _minilm(train: Sequence[str], test: Sequence[str], opts: dict) -> tuple:
    emb = minilm_embed([*train, *test], opts.get("max_length", 128), opts.get("cache", True))
    return emb[:len(train)], emb[len(train):], None


MEMBERS: dict[str, Member] = {
    "word": Member("word 1-2 gram TF-IDF + LR", _tfidf("word", (1, 2))),
    "char": Member("character 3-5 gram TF-IDF + LR", _tfidf("char_wb", (3, 5))),
    "minilm": Member("all-MiniLM-L6-v2 embedding (mean-pooled, head + tail) + LR", _minilm, fit=TEST_CV, scale=True),
    "length": Member("log length (characters, words) + LR", _length),
    # Artifact baselines that cannot read harm (the safety subsets' check, automon.data.safety_report):
    "format": Member("formatting and structure only (lines, indentation, list markers, punctuation) + LR",
                     _format, scale=True),
    "comments": Member("the code's comments alone, word 1-2 gram TF-IDF + LR", _comments),
}


def head_tail(text: str, n: int) -> str:
    """The first and last n/2 characters of a text longer than n."""
    return text if len(text) <= n else text[: n // 2] + "\n" + text[-(n - n // 2):]


def _lr(seed: int, scale: bool = False) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # liblinear, not lbfgs: deterministic to the last bit for a fixed input order and seed.
    lr = LogisticRegression(C=1.0, max_iter=2000, solver="liblinear", random_state=seed)
    return make_pipeline(StandardScaler(), lr) if scale else lr


def fit_predict(member: str, train: Sequence[str], y: Sequence[int], test: Sequence[str], seed: int,
                opts: dict | None = None) -> tuple[np.ndarray, Any, Any]:
    """P(misbehavior) of the test texts from `member` fitted on the training texts, the fitted LR and
    the feature names (None for unnamed features)."""
    m = MEMBERS[member]
    xtr, xte, names = m.featurize(train, test, opts or {})
    lr = _lr(seed, m.scale).fit(xtr, np.asarray(y))
    return lr.predict_proba(xte)[:, 1], lr, names


def cross_validate(member: str, texts: Sequence[str], y: Sequence[int], pair_ids: Sequence[str], seed: int,
                   folds: int, opts: dict | None = None) -> np.ndarray:
    """P(misbehavior) of each text from `member` fitted on the other folds of the same texts, folds
    drawn by pair (both twins in one fold) with a seeded shuffle of the sorted pair ids."""
    m = MEMBERS[member]
    pairs = sorted(set(pair_ids))
    random.Random(f"{seed}:cv").shuffle(pairs)
    fold_of = {p: k % folds for k, p in enumerate(pairs)}
    f = np.array([fold_of[p] for p in pair_ids])
    x = m.featurize(texts, [], opts or {})[0]
    y = np.asarray(y)
    out = np.full(len(texts), 0.5)
    for k in range(folds):
        held = f == k
        if held.any() and len(set(y[~held].tolist())) == 2:
            out[held] = _lr(seed, m.scale).fit(x[~held], y[~held]).predict_proba(x[held])[:, 1]
    return out


# ---------------------------------------------------------------- the z-test

def ngram_z(texts: Sequence[str], labels: Sequence[int], top: int, min_count: int = 5,
            alpha: float = 0.05) -> list[list]:
    """The word 1-2 grams of the test responses that still carry a label: for each n-gram in at least
    `min_count` responses, z = (k - n p0) / sqrt(n p0 (1 - p0)), n responses containing it, k of them
    misbehaving, p0 the split's share of misbehavior (1/2 when paired; an n-gram both twins share
    scores 0). Listed: those beyond the Bonferroni-corrected two-sided `alpha` over every n-gram
    tested, at most `top`, largest |z| first, as [n-gram, z, n, p(misbehavior | n-gram)]."""
    from statistics import NormalDist

    from sklearn.feature_extraction.text import CountVectorizer

    try:
        vec = CountVectorizer(ngram_range=(1, 2), min_df=min_count, binary=True)
        x = vec.fit_transform(list(texts))
    except ValueError:  # no n-gram reaches min_count
        return []
    y = np.asarray(labels)
    n = np.asarray(x.sum(axis=0)).ravel()
    k = np.asarray(x[y == 1].sum(axis=0)).ravel()
    p0 = float(y.mean())
    if not 0 < p0 < 1:
        return []
    z = (k - n * p0) / np.sqrt(n * p0 * (1 - p0))
    crit = NormalDist().inv_cdf(1 - alpha / 2 / len(n))
    names = vec.get_feature_names_out()
    order = [i for i in np.argsort(-np.abs(z), kind="stable")[:top] if abs(z[i]) > crit]
    return [[str(names[i]), round(float(z[i]), 2), int(n[i]), round(float(k[i] / n[i]), 3)] for i in order]


# ---------------------------------------------------------------- AFLite

def aflite(pair_ids: Sequence[str], labels: Sequence[int], features: Sequence[Any], seed: int, splits: int = 64,
           tau: float = 0.75, train_share: float = 0.5, per_round: float = 0.1, ridge: float = 1.0) -> set[str]:
    """Adversarial filtering (AFLite, Le Bras et al. 2020) on whole pairs: in each round, `splits`
    random splits of the remaining pairs into a training share and the rest; on each, one linear
    classifier per feature matrix in `features` (one per adversary family, rows aligned with
    `labels`) learns on the training pairs and scores the held-out ones. A pair is predicted when its
    misbehaving twin scores higher; its predictability is the share of (split, family) in which it
    was held out and predicted. The pairs at or above `tau`, the most predictable first and at most
    `per_round` of the pairs the round started with, are removed (both twins); rounds go on until
    none reaches tau or fewer than 8 pairs are left. Returns the ids of the pairs kept.

    The classifier is ridge regression on the labels (+1 / -1) over the family's full feature
    vectors, solved in its dual form on the linear kernel X X^T computed once: each of the
    splits x families fits is one small linear solve, not an iterative LR (64 x 2 liblinear fits
    per round made AFLite the audit's slowest part)."""
    rows: dict[str, dict[int, int]] = {}
    for i, (pid, y) in enumerate(zip(pair_ids, labels)):
        rows.setdefault(pid, {})[int(y)] = i
    pairs = sorted(p for p, r in rows.items() if set(r) == {0, 1})
    rng = random.Random(seed)
    y_all = np.where(np.asarray(labels) == 1, 1.0, -1.0)
    kernels = []
    for x in features:
        k = x @ x.T
        kernels.append(np.asarray(k.toarray() if hasattr(k, "toarray") else k, dtype=np.float64))
    while len(pairs) >= 8:
        hits = dict.fromkeys(pairs, 0.0)
        seen = dict.fromkeys(pairs, 0)
        for _ in range(splits):
            shuffled = pairs[:]
            rng.shuffle(shuffled)
            cut = int(len(shuffled) * train_share)
            fit, held = shuffled[:cut], shuffled[cut:]
            idx = np.array([rows[p][y] for p in fit for y in (0, 1)])
            held_idx = np.array([rows[p][y] for p in held for y in (0, 1)])  # benign, misbehaving per pair
            for k in kernels:
                alpha = np.linalg.solve(k[np.ix_(idx, idx)] + ridge * np.eye(len(idx)), y_all[idx])
                f = k[np.ix_(held_idx, idx)] @ alpha
                for j, p in enumerate(held):
                    seen[p] += 1
                    hits[p] += 1.0 if f[2 * j + 1] > f[2 * j] else 0.5 if f[2 * j + 1] == f[2 * j] else 0.0
        score = {p: hits[p] / seen[p] for p in pairs if seen[p]}
        drop = sorted((p for p, s in score.items() if s >= tau), key=lambda p: (-score[p], p))
        drop = drop[:max(1, int(per_round * len(pairs)))]
        if not drop:
            break
        gone = set(drop)
        pairs = [p for p in pairs if p not in gone]
    return set(pairs)


# ---------------------------------------------------------------- MiniLM

def _minilm_identity(max_length: int) -> dict[str, Any]:
    weights = minilm_dir() / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
    return {"encoder": "all-MiniLM-L6-v2", "weights_sha256": digest, "pooling": "mean+l2", "text": "response",
            "truncation": "head+tail", "max_length": max_length, "version": EMBEDDING_VERSION}


def minilm_embed(texts: list[str], max_length: int, cache: bool = True, batch_size: int = 32) -> np.ndarray:
    """Embeddings of `texts` (rows in order). The whole matrix is cached under
    $AUTOMON_CACHE/audit_minilm by the hash of the encoder identity and of every text in order, so a
    cached run returns exactly the numbers a fresh one computes (the batches are the same)."""
    ident = _minilm_identity(max_length)
    h = hashlib.sha256(json.dumps(ident, sort_keys=True).encode())
    for t in texts:
        h.update(hashlib.sha256(t.encode()).digest())
    path = Path(default_cache_dir()) / "audit_minilm" / f"{h.hexdigest()[:32]}.npy"
    if cache and path.is_file():
        log.info("audit: minilm embeddings of %d responses from the cache (%s)", len(texts), path.name)
        return np.load(path)
    t0 = time.perf_counter()
    mat, tokens = _encode(texts, max_length, batch_size)
    log.info("audit: minilm embedded %d responses (%d tokens, <= %d each) in %.1f s", len(texts), tokens, max_length,
             time.perf_counter() - t0)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{id(mat)}.npy")
        np.save(tmp, mat)
        tmp.replace(path)
    return mat


_MODEL: dict[str, Any] = {}


def _encode(texts: list[str], max_length: int, batch_size: int) -> tuple[np.ndarray, int]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    if not _MODEL:
        _MODEL["tok"] = AutoTokenizer.from_pretrained(minilm_dir())
        _MODEL["model"] = AutoModel.from_pretrained(minilm_dir()).eval()
    tok, model = _MODEL["tok"], _MODEL["model"]
    body = max_length - 2  # [CLS] ... [SEP]
    ids = []
    for row in tok([t[:20 * max_length] + " " + t[-20 * max_length:] if len(t) > 40 * max_length else t for t in texts],
                   add_special_tokens=False, verbose=False)["input_ids"]:
        row = row if len(row) <= body else row[: body // 2] + row[-(body - body // 2):]
        ids.append([tok.cls_token_id, *row, tok.sep_token_id])
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))  # similar lengths pad little
    out = np.zeros((len(ids), model.config.hidden_size), dtype=np.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as audit.py's BLAS limit: the build's forked re-check holds the other core
    try:
        _batches(tok, model, ids, order, out, batch_size)
    finally:
        torch.set_num_threads(threads)
    return out, sum(len(r) for r in ids)


def _batches(tok, model, ids, order, out, batch_size) -> None:
    import torch

    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        width = max(len(ids[i]) for i in idx)
        inp = torch.tensor([ids[i] + [tok.pad_token_id] * (width - len(ids[i])) for i in idx])
        mask = torch.tensor([[1] * len(ids[i]) + [0] * (width - len(ids[i])) for i in idx])
        with torch.inference_mode():
            hidden = model(input_ids=inp, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        emb = torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1).clamp(min=1.0), dim=-1)
        out[idx] = emb.float().numpy()
