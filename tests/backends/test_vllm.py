"""vLLM path without vLLM: how requests are built (LLM kwargs, SamplingParams, LoRARequest per
prompt, chat_template_kwargs, structured outputs) and how logprobs are read, against objects that
mirror vLLM 0.33's documented structures (shared/docs/apis.md s5a). A fake `vllm` module then runs
a whole sweep through VLLMJudge to check one engine serves the base model and every adapter."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from support import compose, make_adapter, make_build, synthetic_split, tiny_path
from automon.backends.base import (EVIDENCE_JSON_SCHEMA, AnswerTokens, JudgeError, JudgeRequest, LoraAdapter,
                                 evidence_regex)
from automon.backends import vllm_engine as V


# ---------------------------------------------------------------- vLLM 0.33 look-alikes

@dataclass
class Logprob:  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:  # vllm.outputs.CompletionOutput
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = "length"
    lora_request: Any = None


@dataclass
class RequestOutput:  # vllm.outputs.RequestOutput
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


class Recorder:
    def __init__(self, **kw):
        self.kw = kw
        for k, v in kw.items():
            setattr(self, k, v)


@dataclass
class LoRARequest:  # msgspec struct in vLLM; equality by name
    lora_name: str
    lora_int_id: int
    lora_path: str
    base_model_name: str | None = None


@dataclass
class FakeLLM:
    """Records what the engine is asked; answers like a monitor that reads a hash of the prompt."""
    kwargs: dict
    calls: list = field(default_factory=list)
    instances = []  # class-level: how many engines were built

    def __init__(self, **kwargs):
        from transformers import AutoTokenizer

        self.kwargs = kwargs
        self.calls = []
        self.tok = AutoTokenizer.from_pretrained(kwargs["tokenizer"])
        FakeLLM.instances.append(self)

    def chat(self, messages, sampling_params=None, use_tqdm=True, lora_request=None,
             chat_template_kwargs=None, **kw):
        if isinstance(lora_request, list) and len(lora_request) != len(messages):
            raise ValueError("The lengths of prompts and lora_request must be the same")  # as vLLM
        texts = [self.tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True,
                                              **(chat_template_kwargs or {})) for m in messages]
        self.calls.append({"texts": texts, "sp": sampling_params, "lora": lora_request,
                           "ctk": chat_template_kwargs, "use_tqdm": use_tqdm})
        outs = []
        for i, t in enumerate(texts):
            lr = lora_request[i] if isinstance(lora_request, list) else None
            name = lr.lora_name if lr is not None else "base"
            p = (hash((t, name)) % 1000 + 0.5) / 1000.0
            ids = sampling_params.logprob_token_ids
            half = len(ids) // 2
            lp = {tid: Logprob(math.log(p / half) if k < half else math.log((1 - p) / half) - 3.0)
                  for k, tid in enumerate(ids)}
            outs.append(RequestOutput(str(i), t, self.tok.encode(t), [CompletionOutput(
                0, "yes" if p >= 0.5 else "no", [ids[0]], None, [lp])]))
        return outs


def fake_vllm_modules() -> dict[str, types.ModuleType]:
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = Recorder
    lora = types.ModuleType("vllm.lora")
    lora_req = types.ModuleType("vllm.lora.request")
    lora_req.LoRARequest = LoRARequest
    sp = types.ModuleType("vllm.sampling_params")
    sp.StructuredOutputsParams = Recorder
    return {"vllm": vllm, "vllm.lora": lora, "vllm.lora.request": lora_req, "vllm.sampling_params": sp}


NS = SimpleNamespace(SamplingParams=Recorder, StructuredOutputsParams=Recorder)


@pytest.fixture(scope="module")
def tiny_tok():
    from automon.models.loading import load_tokenizer

    return load_tokenizer(SimpleNamespace(pretrained="tiny", revision=None))


@pytest.fixture(scope="module")
def tokens(tiny_tok):
    return AnswerTokens.from_tokenizer(tiny_tok)


# ---------------------------------------------------------------- request building

@pytest.mark.parametrize("ranks,expected", [([8], 8), ([1], 1), ([12], 16), ([8, 33], 64), ([300], 320),
                                             ([512], 512), ([], 1)])
def test_max_lora_rank_rounds_up_to_an_allowed_value(ranks, expected):
    assert V.vllm_max_lora_rank(ranks) == expected
    assert expected in V.ALLOWED_LORA_RANKS


def test_max_lora_rank_too_large_says_what_to_do():
    with pytest.raises(JudgeError, match="backend=hf"):
        V.vllm_max_lora_rank([600])


def test_adapter_rank_read_from_adapter_config(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 12, "rank_pattern": {"q_proj": 24}}))
    assert V.adapter_rank(tmp_path) == 24
    with pytest.raises(JudgeError):
        V.adapter_rank(tmp_path / "missing")


def test_llm_kwargs_enable_lora_prefix_caching_and_rank(tmp_path):
    cfg = compose(["model=qwen3_4b_instruct_2507", "backend=vllm"])
    adapters = [LoraAdapter(f"a{i}", str(tmp_path / f"a{i}"), r) for i, r in enumerate([8, 32, 12, 16, 8, 8])]
    kw = V.llm_kwargs(cfg.model, cfg.backend, adapters)
    assert kw["model"] == "Qwen/Qwen3-4B-Instruct-2507" and kw["tokenizer"] == kw["model"]
    assert kw["enable_lora"] is True and kw["max_lora_rank"] == 32
    assert kw["max_loras"] == 4 and kw["max_cpu_loras"] == 6
    assert kw["enable_prefix_caching"] is True
    assert kw["max_model_len"] == 32768 and kw["dtype"] == "bfloat16"
    assert kw["structured_outputs_config"] == {"backend": "auto"}
    assert "revision" not in kw  # None values are not passed
    base_only = V.llm_kwargs(cfg.model, cfg.backend, [])
    assert "enable_lora" not in base_only and "max_lora_rank" not in base_only
    one = V.llm_kwargs(cfg.model, cfg.backend, adapters[:1])
    assert one["max_loras"] == 1 and one["max_lora_rank"] == 8


def _word_probs(tok, ids, probs):
    """id -> Logprob for the given ids, as vLLM returns the requested logprob_token_ids."""
    return {i: Logprob(math.log(probs[tok.decode([i]).strip().lower()])) for i in ids}


def test_direct_sampling_params_ask_for_every_spelling_the_reader_sums(tokens, tiny_tok):
    """vLLM returns log-probabilities only for the ids the SamplingParams name: they must be the yes
    and no spellings of the tokenizer, read at the single generated position."""
    sp = V.build_sampling_params(NS, "direct", tokens, max_new_tokens=256)
    assert sp.max_tokens == 1 and sp.temperature == 0.0
    words = {tiny_tok.decode([i]).strip().lower() for i in sp.logprob_token_ids}
    assert words == {"yes", "no"}
    # every spelling carries its word's probability: P(yes) = n_yes * 0.05 / (n_yes * 0.05 + n_no * 0.02)
    out = _out([_word_probs(tiny_tok, sp.logprob_token_ids, {"yes": 0.05, "no": 0.02})])
    n_yes = sum(1 for i in sp.logprob_token_ids if tiny_tok.decode([i]).strip().lower() == "yes")
    n_no = len(sp.logprob_token_ids) - n_yes
    assert V.read_direct(out, tokens).p_yes == pytest.approx(n_yes * 0.05 / (n_yes * 0.05 + n_no * 0.02))


def test_evidence_sampling_params_accept_the_trained_answer(tokens, tiny_tok):
    """The regex vLLM enforces admits the answers training taught (both labels); P(true) is not asked
    for here (vLLM masks logprobs under structured output) but read in a second pass (verdict_prompts)."""
    import re

    from automon.prompts import answer_text, parse_answer

    sp = V.build_sampling_params(NS, "evidence", tokens, max_new_tokens=200, seed=3)
    assert sp.max_tokens == 200 and sp.temperature == 0.0 and sp.seed == 3
    assert not hasattr(sp, "logprob_token_ids")  # masked under structured output: read afterwards
    assert sp.structured_outputs.kw == {"regex": evidence_regex()}
    train, _ = synthetic_split(pairs_per_subset=1, train_per_subset=2)
    for s in train[:2]:
        text = answer_text(s, "evidence_v1")
        assert re.fullmatch(evidence_regex(), text), text
        ans = json.loads(text)
        assert list(ans) == list(EVIDENCE_JSON_SCHEMA["properties"]) == EVIDENCE_JSON_SCHEMA["required"]
        assert parse_answer(text, "evidence_v1").pred == s.label


def test_generate_sampling_params_are_plain_greedy(tokens):
    """The policy generator's answers: greedy, seeded, the answer budget, no format and no logprobs
    (a structured-output mask or a logprob request would change what the policy says)."""
    sp = V.build_sampling_params(NS, "generate", tokens, max_new_tokens=64, seed=5)
    assert sp.kw == {"max_tokens": 64, "temperature": 0.0, "seed": 5}


def test_evidence_regex_admits_exactly_the_trained_answer_format():
    import re

    from automon.prompts import answer_text

    rx = evidence_regex()
    quotes = ['plain', 'with "quotes" and \\ backslash', 'line\nbreak\ttab \x01', "ünïcødé ✓ 🙂", "x" * 900,
              "fourth", "fifth"]
    cases = [{"label": 0, "category": "safety", "evidence": []}]
    cases += [{"label": 1, "category": c, "evidence": quotes[:k]} for c in ("safety", "sycophancy", "spec_gaming")
              for k in (0, 1, 3, 7)]
    for case in cases:
        text = answer_text(case, "evidence_v1")
        assert re.fullmatch(rx, text), text
    ok = answer_text(cases[0], "evidence_v1")
    for bad in (ok.replace(": ", ":"), ok.replace(", ", ",\n"), " " + ok, ok.replace("none", "None", 1),
                ok[:-1] + ', "extra": 1}', ok.replace("[]", '["unterminated]'),
                ok.replace("[]", ", ".join(['"a"'] * 4).join("[]"))):
        assert not re.fullmatch(rx, bad), bad


def test_lora_request_per_prompt_and_thinking_off(tmp_path):
    adapters = [LoraAdapter("run-a", str(tmp_path / "a"), 8), LoraAdapter("run-b", "rel/b", 8)]
    loras = V.build_lora_requests(LoRARequest, adapters)
    assert [v.lora_int_id for v in loras.values()] == [1, 2]
    assert all(Path(v.lora_path).is_absolute() for v in loras.values())  # never mistaken for a hub id
    reqs = [JudgeRequest("s1", [{"role": "user", "content": "1"}], adapter="run-b"),
            JudgeRequest("s2", [{"role": "user", "content": "2"}], adapter=None),
            JudgeRequest("s3", [{"role": "user", "content": "3"}], adapter="run-a"),
            JudgeRequest("s4", [{"role": "user", "content": "4"}], adapter="run-b")]
    calls = V.chat_calls(reqs, "SP", loras, enable_thinking=False)
    assert [idx for idx, _ in calls] == [[0, 1, 2, 3]]  # base and adapters mixed in one call
    kw = calls[0][1]
    assert [r and r.lora_name for r in kw["lora_request"]] == ["run-b", None, "run-a", "run-b"]
    assert kw["messages"] == [r.messages for r in reqs]
    base_only = V.chat_calls([reqs[1]], "SP", loras, enable_thinking=False)
    assert base_only[0][1]["lora_request"] is None and V.chat_calls([], "SP", loras, False) == []
    # with the zero adapter loaded, base-model prompts carry it instead of None
    zero = LoRARequest(V.BASE_AS_LORA, 3, "/zero")
    kw0 = V.chat_calls(reqs, "SP", {**loras, V.BASE_AS_LORA: zero}, enable_thinking=False)[0][1]
    assert [r.lora_name for r in kw0["lora_request"]] == ["run-b", V.BASE_AS_LORA, "run-a", "run-b"]
    for _, kw in calls:
        assert kw["chat_template_kwargs"] == {"enable_thinking": False}
        assert kw["sampling_params"] == "SP" and kw["use_tqdm"] is False


def test_zero_adapter_gives_exactly_the_base_model(tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    src = make_adapter(tmp_path / "a", r=8)
    zero = V.zero_adapter(LoraAdapter("a", str(src), 8), tmp_path / "zero")
    assert zero.name == V.BASE_AS_LORA and V.adapter_rank(zero.path) == 8
    base = AutoModelForCausalLM.from_pretrained(tiny_path(), dtype=torch.float32).eval()
    ids = torch.tensor([[9707, 1879, 151645, 198, 9693]])
    with torch.inference_mode():
        ref = base(ids).logits
        with_zero = PeftModel.from_pretrained(base, zero.path)(ids).logits
        with_src = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(tiny_path(), dtype=torch.float32), str(src))(ids).logits
    assert torch.equal(with_zero, ref)
    assert not torch.allclose(with_src, ref, atol=1e-3)  # the source adapter does change the model
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "adapter_config.json").write_text("{}")
    with pytest.raises(JudgeError, match="safetensors"):
        V.zero_adapter(LoraAdapter("b", str(tmp_path / "bin"), 8), tmp_path / "z2")


# ---------------------------------------------------------------- reading outputs

def _out(logprobs, text="yes", token_ids=(9693,)):
    return RequestOutput("0", None, [1, 2], [CompletionOutput(0, text, list(token_ids), None, logprobs)])


def test_read_direct_sums_yes_variants_over_yes_plus_no(tokens):
    lp = {9693: Logprob(math.log(0.5), 1, "yes"), 9454: Logprob(math.log(0.1), 2, "Yes"),
          2152: Logprob(math.log(0.2), 3, "no"), 151645: Logprob(math.log(0.15), 4, "<|im_end|>")}
    r = V.read_direct(_out([lp]), tokens)
    assert r.p_yes == pytest.approx(0.6 / 0.8) and r.mass == pytest.approx(0.8) and r.text == "yes"
    assert V.read_direct(_out([{1: Logprob(-0.1)}]), tokens).p_yes is None  # no yes/no mass at all
    assert V.read_direct(_out(None), tokens).error


def test_read_evidence_finds_the_verdict_token(tokens):
    from automon.models.loading import load_tokenizer

    tok = load_tokenizer(SimpleNamespace(pretrained="tiny", revision=None))
    text = '{"misbehavior": false, "category": "none", "severity": "none", "evidence": []}'
    ids = tok.encode(text, add_special_tokens=False)
    k = next(i for i, t in enumerate(ids) if tok.decode([t]).strip() == "false")
    lps = [{t: Logprob(-0.01)} for t in ids]
    lps[k] = {tokens.true[0]: Logprob(math.log(0.3)), tokens.false[0]: Logprob(math.log(0.6))}
    r = V.read_evidence(_out(lps, text, ids), tokens, tok.decode)
    assert r.text == text and r.p_yes == pytest.approx(1 / 3)
    no_verdict = V.read_evidence(_out([{}], "garbage", [123]), tokens, tok.decode)
    assert no_verdict.p_yes is None and no_verdict.text == "garbage"


def test_verdict_prompts_end_right_before_the_verdict_token():
    from automon.models.loading import load_tokenizer

    tok = load_tokenizer(SimpleNamespace(pretrained="tiny", revision=None))
    text = '{"misbehavior": true, "category": "safety", "severity": "high", "evidence": ["x"]}'
    ids = tok.encode(text, add_special_tokens=False)
    outs = [RequestOutput("0", None, [7, 8], [CompletionOutput(0, text, ids, None, None)]),
            RequestOutput("1", None, [9], [CompletionOutput(0, "{", ids[:1], None, None)])]
    (i, prompt), = V.verdict_prompts(outs, tok.decode)
    assert i == 0 and prompt[:2] == [7, 8]
    assert tok.decode(prompt[2:]) == '{"misbehavior":' and tok.decode(ids[len(prompt) - 2:][:1]).strip() == "true"


# ---------------------------------------------------------------- the whole plug-in, faked engine

def test_sweep_runs_in_one_engine_with_a_lora_request_per_prompt(tmp_path, monkeypatch):
    for name, mod in fake_vllm_modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    FakeLLM.instances.clear()
    build = make_build(tmp_path / "build", pairs_per_subset=2)
    make_adapter(tmp_path / "sweep" / "run_sc" / "adapter", subset="safety_code", r=8)
    make_adapter(tmp_path / "sweep" / "run_sg" / "adapter", subset="sg_code", r=12, seed=1)
    from automon.evaluation import evaluate
    from automon.models.loading import load_tokenizer
    from automon.prompts import monitor_messages, prompt_text

    c = compose(["model=tiny", "backend=vllm", f"data.dir={build}", f"sweep_dir={tmp_path / 'sweep'}",
                 f"output_dir={tmp_path / 'out'}", "wandb.mode=disabled", "progress=false", "bootstrap.n=50"])
    res = evaluate(c)
    assert len(FakeLLM.instances) == 1
    llm = FakeLLM.instances[0]
    # two adapters + the zero adapter that stands for the base model
    assert llm.kwargs["enable_lora"] and llm.kwargs["max_lora_rank"] == 16 and llm.kwargs["max_loras"] == 3
    assert llm.kwargs["model"] == tiny_path() and llm.kwargs["enable_prefix_caching"]
    tok = load_tokenizer(c.model)
    test = res.predictions["base"]
    n = len(test)
    seen_lora = [r.lora_name for call in llm.calls if call["lora"] for r in call["lora"]]
    assert sorted(set(seen_lora)) == sorted(["run_sc", "run_sg", V.BASE_AS_LORA]) and len(seen_lora) == 3 * n
    # what vLLM renders (chat + enable_thinking=False) is byte for byte the shared renderer's prompt
    from automon.data.io import load_build

    by_id = {s.id: s for s in load_build(build).samples("test")}
    expected = {prompt_text(tok, monitor_messages(by_id[r["id"]], "direct_v1"), False) for r in test}
    assert {t for call in llm.calls for t in call["texts"]} == expected
    assert all(call["ctk"] == {"enable_thinking": False} for call in llm.calls)
    assert all(call["sp"].max_tokens == 1 and call["sp"].temperature == 0.0 for call in llm.calls)
    # different adapters -> different answers, and every output file of a sweep is there
    assert [r["p_yes"] for r in res.predictions["run_sc"]] != [r["p_yes"] for r in res.predictions["run_sg"]]
    for f in ("matrix.csv", "matrix.md", "heatmap.png", "pareto.png", "curves.png", "metrics.json", "report.md"):
        assert (tmp_path / "out" / f).exists(), f


def test_vllm_and_openai_are_imported_only_when_selected():
    code = ("import sys, automon.backends, automon.evaluation, automon.metrics, automon.report.tables; "
            "bad = [m for m in ('vllm', 'openai') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
