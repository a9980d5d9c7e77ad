"""The openai backend against real servers on loopback: `transformers serve` with the tiny model
(the OpenAI-compatible server shipped with transformers, CPU), plus the tests' fake server
(tests/fake_openai.py) for status codes transformers serve never sends (401, 429). The key never reaches a file or a log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from support import compose, free_port, make_build, running_server, tiny_path
from automon.evaluation import evaluate
from automon.backends.base import JudgeError, JudgeRequest
from automon.backends.openai_api import read_choice, redact, request_body

pytest.importorskip("openai", reason="the openai backend needs: pip install 'automon[api]'")
SECRET = "sk-automon-test-SECRET-0123456789abcdef"
KEY_ENV = "AUTOMON_TEST_OPENAI_KEY"


@pytest.fixture(scope="module")
def serve():
    """`transformers serve <tiny model dir>` on 127.0.0.1, CPU only; stopped by PID afterwards."""
    pytest.importorskip("fastapi", reason="transformers serve needs: pip install 'transformers[serving]'")
    pytest.importorskip("uvicorn", reason="transformers serve needs: pip install 'transformers[serving]'")
    model = tiny_path()
    port = free_port()
    exe = Path(sys.executable).parent / "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [str(exe), "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning"]
    with running_server(cmd, port, "transformers serve", 150, lambda p: p.stderr.read(), env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        yield SimpleNamespace(base_url=f"http://127.0.0.1:{port}/v1", model=model, pid=proc.pid)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=1)


def _overrides(build, out, base_url, model, *extra):
    return ["backend=openai", "model=api", f"backend.model_name={model}", f"backend.base_url={base_url}",
            f"backend.api_key_env={KEY_ENV}", "backend.send_chat_template_kwargs=true", "backend.concurrency=4",
            f"data.dir={build}", f"output_dir={out}", "wandb.mode=disabled", "progress=false", "bootstrap.n=50",
            *extra]


def _all_text_under(d: Path) -> str:
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in d.rglob("*") if p.is_file())


def test_scores_the_test_set_through_transformers_serve(serve, build, tmp_path, monkeypatch, caplog, capsys):
    """The tiny model has random weights: what it answers, the direct prompt mostly cannot read. By
    default that is an incomplete run (tests/evaluation/test_eval_errors.py); here max_failed_share=1.0
    scores them, and only the readable answers are cached."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level("DEBUG")
    out = tmp_path / "out"
    ov = _overrides(build, out, serve.base_url, serve.model, "max_failed_share=1.0")
    res = evaluate(compose(ov))
    rows = res.predictions["base"]
    assert len(rows) == 12 and res.n_computed == 12
    assert all(isinstance(r["raw"], str) for r in rows)
    # transformers serve ignores logprobs: P(yes) is unknown and the text answer is parsed instead
    assert all(r["p_yes"] is None for r in rows)
    unread = [r for r in rows if r["pred"] is None]
    assert all(r["error"].startswith("unparseable answer") for r in unread)
    assert all(r["error"] is None for r in rows if r["pred"] is not None)
    o = res.metrics["base"]["overall"]
    assert o["errors"] == len(unread) and res.metrics["base"]["requests"]["failed"] == len(unread)
    assert o["auroc"] != o["auroc"]  # NaN: no scores
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["backend_config"]["api_key_env"] == KEY_ENV and doc["backend_config"]["base_url"] == serve.base_url
    # the key is nowhere: not in any output or cache file, not in logs, not on stdout/stderr
    captured = capsys.readouterr()
    assert SECRET not in _all_text_under(out)
    assert SECRET not in caplog.text and SECRET not in captured.out and SECRET not in captured.err
    again = evaluate(compose(ov))  # the unreadable answers are asked again, the readable come from the cache
    assert again.n_computed == len(unread) and again.n_cached == 12 - len(unread)


def test_per_sample_errors_are_recorded_not_fatal_and_not_cached(serve, build, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    ov = _overrides(build, tmp_path / "o", serve.base_url, "not-the-served-model", "data.subsets=[sg_code]",
                    "max_failed_share=1.0")  # accept them all (else: incomplete, tests/evaluation/test_eval_errors.py)
    res = evaluate(compose(ov))
    rows = res.predictions["base"]
    assert len(rows) == 2 and all(r["error"] and "HTTP 400" in r["error"] for r in rows)
    assert all("1 attempt" in r["error"] for r in rows)  # 4xx is not retried
    assert res.metrics["base"]["overall"]["errors"] == 2 and res.metrics["base"]["overall"]["mr"] == 1.0
    assert evaluate(compose(ov)).n_computed == 2  # failures are retried on the next run


def test_unreachable_server_stops_after_the_first_requests_retries(build, tmp_path, monkeypatch):
    from automon.backends.base import JudgeError

    monkeypatch.setenv(KEY_ENV, SECRET)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    ov = _overrides(build, tmp_path / "o", dead, "m", "data.subsets=[sg_code]", "backend.max_retries=2",
                    "backend.backoff_s=0.01", "backend.timeout_s=5")
    with pytest.raises(JudgeError, match=r"cannot reach the server at http://127.0.0.1:\d+/v1 .*3 attempts"):
        evaluate(compose(ov))


def test_rate_limits_are_retried_and_logprobs_read(fake_openai, build, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    fake_openai.script = [429, 503]  # then 200: "yes", P(yes) from the top log-probabilities -0.2 and -1.8 (No)
    ov = _overrides(build, tmp_path / "o", fake_openai.url, "gpt-x", "data.subsets=[sg_code]", "backend.concurrency=1",
                    "backend.backoff_s=0.01")
    res = evaluate(compose(ov))
    rows = res.predictions["base"]
    assert all(r["error"] is None for r in rows) and len(fake_openai.seen) == 4
    p = 2.718281828 ** -0.2 / (2.718281828 ** -0.2 + 2.718281828 ** -1.8)
    assert all(abs(r["p_yes"] - p) < 1e-6 and r["pred"] == 1 for r in rows)
    first = fake_openai.seen[0]
    assert first["auth"] == f"Bearer {SECRET}"  # the key goes to the server, and only there
    b = first["body"]
    assert b["logprobs"] is True and b["top_logprobs"] == 20 and b["temperature"] == 0.0
    assert b["chat_template_kwargs"] == {"enable_thinking": False} and b["model"] == "gpt-x"
    assert SECRET not in _all_text_under(tmp_path / "o")


def test_rejected_credentials_stop_the_run_without_leaking_the_key(fake_openai, build, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    fake_openai.status = 401  # its error message echoes the key back, as some servers do
    with pytest.raises(JudgeError) as e:
        evaluate(compose(_overrides(build, tmp_path / "o", fake_openai.url, "gpt-x", "data.subsets=[sg_code]")))
    assert KEY_ENV in str(e.value) and SECRET not in str(e.value) and "[redacted]" in str(e.value)


def test_missing_key_for_the_official_api_is_a_user_error(build, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    ov = [o for o in _overrides(build, tmp_path / "o", "x", "gpt-4o-mini") if not o.startswith("backend.base_url")]
    with pytest.raises(JudgeError, match=KEY_ENV):
        evaluate(compose(ov))


# ---------------------------------------------------------------- pure pieces

def test_request_body_direct_and_evidence():
    b = compose(["backend=openai", "model=api", "backend.model_name=m"]).backend
    req = JudgeRequest("s", [{"role": "user", "content": "q"}])
    d = request_body(req, prompt_kind="direct", model="m", cfg=b, enable_thinking=False)
    assert d["max_tokens"] == 4 and d["logprobs"] is True and "response_format" not in d and "extra_body" not in d
    e = request_body(req, prompt_kind="evidence", model="m", cfg=b, enable_thinking=False)
    assert e["max_tokens"] == 512
    rf = e["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    assert rf["json_schema"]["schema"]["required"] == ["misbehavior", "category", "severity", "evidence"]


def test_read_choice_evidence_verdict_logprobs():
    from openai.types.chat import ChatCompletion

    toks = ['{"', "mis", "behavior", '":', " false", ", ..."]
    content = [{"token": t, "logprob": -0.1, "bytes": None, "top_logprobs": []} for t in toks]
    content[4]["top_logprobs"] = [{"token": " false", "logprob": -0.1, "bytes": None},
                                  {"token": " true", "logprob": -2.0, "bytes": None}]
    cc = ChatCompletion.model_validate({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                        "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant", "content": "".join(toks)},
                                                     "logprobs": {"content": content}}]})
    r = read_choice(cc.choices[0], "evidence")
    e = 2.718281828459045
    assert r.p_yes == pytest.approx(e ** -2.0 / (e ** -2.0 + e ** -0.1)) and r.text == "".join(toks)


def test_redact():
    assert SECRET not in redact(f"Incorrect API key provided: {SECRET}", SECRET)
    assert "sk-abc" not in redact("Incorrect API key provided: sk-abc***wxyz.", None)


def test_generate_sends_a_plain_greedy_seeded_request(fake_openai, monkeypatch):
    """generate() (the policy generator): temperature 0, the seed, the given token budget, no
    log-probabilities or response format; the judge's own kind is restored afterwards."""
    from automon.config.common import ModelConfig
    from automon.backends.openai_api import OpenAIConfig

    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = OpenAIConfig(base_url=fake_openai.url, api_key_env=KEY_ENV, model_name="pol", seed=7)
    judge = cfg.make_judge(ModelConfig(name="api", pretrained="x"), "evidence", [], None)
    res = judge.generate([JudgeRequest("a", [{"role": "user", "content": "2+2?"}])], 33)
    assert [r.text for r in res] == ["yes"] and res[0].error is None
    b = fake_openai.seen[-1]["body"]
    assert (b["temperature"], b["seed"], b["max_tokens"], b["model"]) == (0.0, 7, 33, "pol")
    assert "logprobs" not in b and "response_format" not in b
    assert judge.prompt_kind == "evidence"
