"""The hf backend: P(yes) equals a direct computation, batching with left padding changes nothing,
each adapter scores like the adapter alone, the base model ignores the adapters, evidence answers
carry P(true) read at the verdict token."""

from __future__ import annotations

import math
import pytest
import torch

from support import make_adapter, synthetic_split, tiny_path
from automon.config.common import ModelConfig
from automon.backends.base import AnswerTokens, JudgeRequest, LoraAdapter, verdict_position
from automon.backends.hf import HFConfig, HFJudge, _VerdictRecorder, plan_batches
from automon.models.loading import load_tokenizer
from automon.prompts import monitor_messages, prompt_text

MODEL = ModelConfig(name="tiny", pretrained="tiny", dtype="float32")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(MODEL)


@pytest.fixture(scope="module")
def prompts(tok):
    _, test = synthetic_split(pairs_per_subset=1, long_every=3, long_words=120)
    return [prompt_text(tok, monitor_messages(s, "direct_v1")) for s in test[:7]]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    d = tmp_path_factory.mktemp("adapters")
    return [LoraAdapter("a", str(make_adapter(d / "a", seed=1)), 8),
            LoraAdapter("b", str(make_adapter(d / "b", seed=2)), 8)]


def _reference_p_yes(model, tok, text):
    """apis.md s3: one unpadded forward, P(yes variants) / P(yes + no variants) at the last position."""
    t = AnswerTokens.from_tokenizer(tok)
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        lp = model(input_ids=ids).logits[0, -1].float().log_softmax(-1)
    py, pn = lp[list(t.yes)].exp().sum(), lp[list(t.no)].exp().sum()
    return float(py / (py + pn))


def _req(prompts, adapter=None):
    return [JudgeRequest(id=str(i), messages=[], prompt=p, adapter=adapter) for i, p in enumerate(prompts)]


def test_p_yes_matches_reference_and_batching_changes_nothing(tok, prompts):
    from transformers import AutoModelForCausalLM

    ref_model = AutoModelForCausalLM.from_pretrained(tiny_path(), dtype=torch.float32).eval()
    ref = [_reference_p_yes(ref_model, tok, p) for p in prompts]
    one = HFJudge(MODEL, HFConfig(batch_size=1, device="cpu"), "direct", [], tok).score(_req(prompts))
    many = HFJudge(MODEL, HFConfig(batch_size=5, device="cpu"), "direct", [], tok).score(_req(prompts))
    assert len({len(tok.encode(p)) for p in prompts}) > 2  # lengths differ, so padding is exercised
    for r, a, b in zip(ref, one, many):
        assert a.p_yes == pytest.approx(r, abs=1e-5) and b.p_yes == pytest.approx(r, abs=1e-5)
        assert 0 < b.mass <= 1 and isinstance(b.text, str)


def test_each_adapter_scores_like_itself_and_base_ignores_adapters(tok, prompts, adapters):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = HFConfig(batch_size=4, device="cpu")
    judge = HFJudge(MODEL, cfg, "direct", adapters, tok)
    sub = prompts[:4]
    mixed = _req(sub, "a") + _req(sub, None) + _req(sub, "b")
    out = judge.score(mixed)
    got_a, got_base, got_b = out[:4], out[4:8], out[8:]
    plain = AutoModelForCausalLM.from_pretrained(tiny_path(), dtype=torch.float32).eval()
    for p, r in zip(sub, got_base):
        assert r.p_yes == pytest.approx(_reference_p_yes(plain, tok, p), abs=1e-5)
    for name, got in (("a", got_a), ("b", got_b)):
        base = AutoModelForCausalLM.from_pretrained(tiny_path(), dtype=torch.float32)
        alone = PeftModel.from_pretrained(base, adapters[0 if name == "a" else 1].path).eval()
        for p, r in zip(sub, got):
            assert r.p_yes == pytest.approx(_reference_p_yes(alone, tok, p), abs=1e-5)
    assert max(abs(a.p_yes - b.p_yes) for a, b in zip(got_a, got_b)) > 1e-3  # adapters really differ


def test_a_prompt_is_tokenised_once_however_many_judges_ask_it(tok, prompts, adapters):
    """In a matrix the base model and every adapter score the same texts: each is tokenised once, and
    the results are those of each judge asked alone."""
    asked: list[str] = []

    class Counting:
        def __call__(self, texts, **kw):
            asked.extend(texts)
            return tok(texts, **kw)

        def __getattr__(self, name):
            return getattr(tok, name)

    judge = HFJudge(MODEL, HFConfig(batch_size=3, device="cpu"), "direct", adapters, tok)
    sub = prompts[:4]
    alone = [judge.score(_req(sub, a)) for a in ("a", None, "b")]
    judge.tokenizer, judge.timing.prompt_tokens = Counting(), 0
    together = judge.score(_req(sub, "a") + _req(sub, None) + _req(sub, "b"))
    assert sorted(asked) == sorted(sub)                                   # 4 texts tokenised, not 12
    assert judge.timing.prompt_tokens == 3 * sum(len(tok.encode(p, add_special_tokens=False)) for p in sub)
    assert [r.p_yes for r in together] == [r.p_yes for group in alone for r in group]


def test_plan_batches_respects_both_limits():
    lengths = [5, 100, 7, 60, 60, 3, 2000, 8]
    batches = plan_batches(lengths, batch_size=3, max_batch_tokens=200)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 200
    assert batches[0] == [6]  # the over-long prompt runs alone, first (longest first)


def test_verdict_position():
    assert verdict_position(['{"', "mis", "behavior", '":', " true", ","]) == 4
    assert verdict_position(['{"', "misbehavior", '":', " False"]) == 3
    assert verdict_position(["true", " yes"]) is None  # no "misbehavior" key before it
    assert verdict_position([]) is None


def test_evidence_reads_p_true_at_the_verdict_token(tok, monkeypatch):
    """A scripted generate() that emits a JSON verdict and feeds the recorder known scores."""
    judge = HFJudge(MODEL, HFConfig(device="cpu", max_new_tokens=64), "evidence", [], tok)
    t = judge.tokens
    answer = '{"misbehavior": true, "category": "safety", "severity": "high", "evidence": []}'
    ids = tok.encode(answer, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    k = verdict_position([tok.decode([i]) for i in ids])
    assert k is not None

    def fake_generate(input_ids, attention_mask, generation_config, logits_processor):
        rec = logits_processor[0]
        assert isinstance(rec, _VerdictRecorder)
        for step in range(len(ids)):
            scores = torch.full((input_ids.shape[0], 151936), -30.0)
            if step == k:
                scores[:, t.true[0]] = math.log(0.6)
                scores[:, t.false[0]] = math.log(0.2)
            rec(None, scores)
        new = torch.tensor([ids] * input_ids.shape[0])
        return torch.cat([input_ids, new], 1)

    monkeypatch.setattr(judge.model, "generate", fake_generate)
    out = judge.score([JudgeRequest("x", [], prompt="<|im_start|>user\nhi<|im_end|>\n")])
    assert out[0].text == answer
    assert out[0].p_yes == pytest.approx(0.75, abs=1e-4)


def test_evidence_generation_runs_on_the_tiny_model(tok, prompts):
    judge = HFJudge(MODEL, HFConfig(device="cpu", max_new_tokens=6, batch_size=4), "evidence", [], tok)
    a = judge.score(_req(prompts[:3]))
    b = judge.score(_req(prompts[:3]))
    assert [r.text for r in a] == [r.text for r in b]  # greedy
    assert all(isinstance(r.text, str) and r.error is None for r in a)


def test_missing_rendered_prompt_is_an_error(tok):
    judge = HFJudge(MODEL, HFConfig(device="cpu"), "direct", [], tok)
    with pytest.raises(ValueError, match="prompt_text"):
        judge.score([JudgeRequest("x", [{"role": "user", "content": "hi"}], prompt=None)])


def test_cpu_uses_float32_for_half_precision_configs(tok):
    m = ModelConfig(name="tiny", pretrained="tiny", dtype="bfloat16")
    judge = HFJudge(m, HFConfig(device="cpu"), "direct", [], tok)
    assert next(judge.model.parameters()).dtype == torch.float32


def test_generate_is_greedy_batch_independent_and_matches_a_plain_greedy_loop(tok):
    """generate(): the policy generator's answers. Against an unbatched greedy loop (argmax, one token
    at a time, stop at the template's end token) on prompts of different lengths."""
    from transformers import AutoModelForCausalLM

    texts = ["What is 2 + 2?", "Name a colour of the sky on a clear day, and explain at length why it is so."]
    prompts = [prompt_text(tok, [{"role": "user", "content": t}]) for t in texts]
    reqs = _req(prompts)
    one = HFJudge(MODEL, HFConfig(batch_size=1, device="cpu"), "generate", [], tok).generate(reqs, 12)
    many = HFJudge(MODEL, HFConfig(batch_size=4, device="cpu"), "generate", [], tok).generate(reqs, 12)
    assert [r.text for r in one] == [r.text for r in many]
    model = AutoModelForCausalLM.from_pretrained(tiny_path(), dtype=torch.float32).eval()
    stop = {tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id}
    for p, r in zip(prompts, one):
        ids = tok.encode(p, add_special_tokens=False)
        out = []
        with torch.no_grad():
            for _ in range(12):
                nxt = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
                if nxt in stop:
                    break
                out.append(nxt)
        assert r.text == tok.decode(out, skip_special_tokens=True)
        assert len(tok.encode(r.text, add_special_tokens=False)) <= 12 + 2
