"""eval/holdout.py on bad inputs (docs/errors.md): changed builds, adapters of another base
model, unreachable and failing OpenAI-compatible servers (a real HTTP server on localhost, the real
openai client), incomplete evaluations that never replace better results."""

from __future__ import annotations

import json
import shutil

import pytest

from support import compose, cpu_overrides, free_port, make_adapter, make_build, run_holdout
from automon.data.io import BuildChanged
from automon.evaluation import AdapterMismatch, evaluate
from automon.evaluation.errors import IncompleteEvaluation
from automon.evaluation.monitors import resolve_monitors

pytest.importorskip("openai")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=1)


@pytest.fixture
def server(fake_openai):
    """The tests' fake OpenAI-compatible server (tests/fake_openai.py), answering HTTP 500 until a
    test sets `status = 200`."""
    fake_openai.status = 500
    return fake_openai


def _openai(build, out, url, *extra):
    return [f"data.dir={build}", f"output_dir={out}", "backend=openai", "model=api", "backend.model_name=m",
            f"backend.base_url={url}", "backend.max_retries=0", "backend.logprobs=false", "wandb.mode=disabled",
            "progress=false", "bootstrap.n=20", *extra]


def test_unreachable_server_fails_fast_with_one_line_and_writes_nothing(tmp_path, build):
    r = run_holdout(*_openai(build, tmp_path / "o", f"http://127.0.0.1:{free_port()}/v1", "backend.max_retries=5"))
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.rstrip().splitlines()[-1]
    assert "Traceback" not in r.stderr and last.startswith("error: cannot reach the server at http://127.0.0.1:")
    assert "backend.base_url" in last
    # fast: the first request alone, with at most PROBE_RETRIES retries, not max_retries=5 rounds of
    # backoff for every request (counted, not timed, so a loaded machine cannot fail it)
    from automon.backends.openai_api import PROBE_RETRIES

    assert PROBE_RETRIES < 5 and f"; {PROBE_RETRIES + 1} attempts)" in last, last
    assert not (tmp_path / "o").exists()


def test_failed_requests_mark_the_report_incomplete_are_retried_and_never_replace_better_results(
        tmp_path, build, server):
    out = tmp_path / "o"
    c = compose(_openai(build, out, server.url))
    failed = r"(\d+) of \1 requests to backend=openai failed; monitor base \(\1/\1\) is over max_failed_share=0.05"
    with pytest.raises(IncompleteEvaluation, match=failed + ".*HTTP 500"):
        evaluate(c)
    n = len(server.seen)
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["requests"]["failed"] == doc["requests"]["n"] == n and doc["requests"]["complete"] is False
    assert (out / "report.md").read_text().split("\n")[2].startswith(f"**INCOMPLETE: {n} of {n} requests failed")

    server.status = 200  # the server is back: everything failed is sent again
    server.seen.clear()
    res = evaluate(c)
    assert len(server.seen) == n and res.n_computed == n
    good = json.loads((out / "metrics.json").read_text())
    assert good["requests"] == {**good["requests"], "failed": 0, "complete": True}
    assert "INCOMPLETE" not in (out / "report.md").read_text()

    server.status = 500
    server.seen.clear()
    evaluate(c)  # all from the cache: a failing server is not even asked
    assert server.seen == []

    # A worse run (an empty cache, the server failing) keeps the complete results and says so.
    worse = compose(_openai(build, out, server.url, f"cache_dir={tmp_path / 'empty'}"))
    before = (out / "metrics.json").read_text(), (out / "report.md").read_text()
    with pytest.raises(IncompleteEvaluation, match="earlier results there, with fewer failures, were kept"):
        evaluate(worse)
    assert ((out / "metrics.json").read_text(), (out / "report.md").read_text()) == before


def test_a_few_failures_below_max_failed_share_complete_the_evaluation(tmp_path, build, server):
    c = compose(_openai(build, tmp_path / "o", server.url, "max_failed_share=1.0"))
    res = evaluate(c)  # every request failed, but the user accepts any share
    doc = res.metrics[res.monitors[0].name]
    assert doc["requests"]["complete"] is True and doc["requests"]["failed"] == doc["requests"]["n"]
    with pytest.raises(Exception, match="max_failed_share=1.5 must lie in"):
        compose(_openai(build, tmp_path / "o", server.url, "max_failed_share=1.5"))


def test_cli_incomplete_evaluation_exits_2_with_one_line(tmp_path, build, server):
    r = run_holdout(*_openai(build, tmp_path / "o", server.url))
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.rstrip().splitlines()[-1]
    assert "Traceback" not in r.stderr
    assert last.startswith("error: ") and "requests to backend=openai failed" in last and "rerun" in last
    assert "report.md, marked incomplete" in last


def test_unparseable_answers_of_a_server_are_failures_never_cached(tmp_path, build, server):
    """Formerly a server answering valid HTTP with text the prompt cannot read gave exit 0 and cached it."""
    server.status, server.answer = 200, "<html>Service temporarily unavailable</html>"
    out = tmp_path / "o"
    c = compose(_openai(build, out, server.url))
    with pytest.raises(IncompleteEvaluation, match=r"first error: unparseable answer '<html>.*backend.model_name"):
        evaluate(c)
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["requests"]["complete"] is False and doc["requests"]["failed"] == doc["requests"]["n"]
    assert (out / "report.md").read_text().split("\n")[2].startswith("**INCOMPLETE")
    assert not (out / "identity.json").exists()
    cached = [ln for f in (out / "cache").glob("*.jsonl") for ln in f.read_text().splitlines()
              if '"key"' not in ln] if (out / "cache").exists() else []
    assert cached == []  # the garbage is not kept: the next run asks again
    n = len(server.seen)
    server.answer = "yes"
    server.seen.clear()
    res = evaluate(c)
    assert len(server.seen) == n and res.metrics[res.monitors[0].name]["requests"]["complete"] is True
    r = run_holdout(*_openai(build, tmp_path / "o2", server.url, "backend.max_retries=0"))
    assert r.returncode == 0, r.stderr[-2000:]
    server.answer = "maybe"
    r = run_holdout(*_openai(build, tmp_path / "o3", server.url))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("error: ") and "unparseable answer 'maybe'" in r.stderr


def test_adapter_whose_peft_config_names_another_base_is_refused(tmp_path, build):
    ad = make_adapter(tmp_path / "run" / "adapter")  # automon_adapter.json says model=tiny ...
    f = ad / "adapter_config.json"
    cfg = json.loads(f.read_text())
    cfg["base_model_name_or_path"] = "Qwen/Qwen3-8B"  # ... but PEFT says the weights belong to another model
    f.write_text(json.dumps(cfg))
    ov = cpu_overrides(build, tmp_path / "o", f"adapter={ad}")
    with pytest.raises(AdapterMismatch, match="base_model_name_or_path=Qwen/Qwen3-8B"):
        resolve_monitors(compose(ov))
    (m,) = resolve_monitors(compose([*ov, "allow_mismatch=true"]))
    assert any("Qwen/Qwen3-8B" in d for d in m.mismatches)  # evaluated, and metrics.json records it
    ok = make_adapter(tmp_path / "run2" / "adapter")  # as saved: no difference
    assert resolve_monitors(compose(cpu_overrides(build, tmp_path / "o", f"adapter={ok}")))[0].mismatches == []


def test_test_jsonl_changed_after_the_build_is_refused(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    with open(b / "test.jsonl", "a") as f:
        f.write((b / "test.jsonl").read_text().splitlines()[0] + "\n")  # a duplicated sample
    with pytest.raises(BuildChanged, match="test.jsonl was changed after the build"):
        evaluate(compose(cpu_overrides(b, tmp_path / "o")))
    assert not (tmp_path / "o").exists()
