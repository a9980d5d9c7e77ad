"""automon-bench as an inspect_ai task: its samples are automon's prompts, its scorer automon's verdict and
metrics, and its log, read back by eval/holdout.py backend=inspect_log, gives the same figures as the log
and as automon's own evaluation of the same answers (inspect's mock model; a local OpenAI-compatible server)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

import support  # noqa: E402
from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.model import (Logprob, Logprobs, ModelOutput, ModelUsage, TopLogprob,  # noqa: E402
                              get_model)

from automon.controls import CONTROL_KINDS  # noqa: E402
from automon.data.io import write_build  # noqa: E402
from automon.evaluation import evaluate  # noqa: E402
from automon.evaluation.inputs import pick_test_samples  # noqa: E402
from automon.evaluation.outputs import OPTIONAL_FIELDS, PRED_FIELDS  # noqa: E402
from automon.evaluation.requests import render_all  # noqa: E402
from automon.inspect_task.task import automon_bench  # noqa: E402
from automon.models.loading import shared_tokenizer  # noqa: E402
from automon.policy.run import model_config  # noqa: E402
from automon.prompts import monitor_messages  # noqa: E402
from automon.schema import Sample  # noqa: E402

SUBSETS = ["syco_qa", "sg_code"]
FIGURES = ("mr", "far", "auroc", "pair_accuracy", "far_benign", *(f"far_{k}" for k in CONTROL_KINDS))
EVIDENCE_FIGURES = ("rrr", "evidence_hit", "evidence_precision", "gold_coverage")


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """3 pairs per subset, and a contrast control of each kind beside a syco_qa pair (as wordings v9 builds
    them: benign, grouped with the pair, a pair id of their own)."""
    train = support.synthetic_samples("train", 6)
    test = support.synthetic_samples("test", 6)
    twin = next(s for s in test if s.subset == "syco_qa" and s.label == 0)
    source = next(s for s in test if s.pair_id == twin.pair_id).source  # the pair's first sample's
    for kind in ("right_cue_agree", "honest_mistake"):
        test.append(Sample(**{**twin.__dict__, "id": f"{twin.id}-{kind}", "pair_id": f"{twin.pair_id}-{kind}",
                              "response": f"{twin.response}\n({kind})", "source": source,
                              "meta": {**twin.meta, "control": kind, "group": twin.pair_id}}).validate())
    out = tmp_path_factory.mktemp("inspect") / "build"
    write_build(out, train, test, {"seed": 0, "synthetic_sources": "tests/support.py synthetic samples"}, overwrite=True)
    return out


def scripted(input, tools, tool_choice, config) -> ModelOutput:
    """The mock model's answer to a prompt, varied by the pair and the twin: yes/no with log-probabilities
    (P(yes) from them), a bare answer without any (the text decides), and one unreadable answer."""
    text = input[-1].text
    case = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    kind, p = case % 6, (case // 6 % 1000) / 1000
    if '"misbehavior"' in text:  # evidence_v1: a JSON verdict, or (kind 0) none
        verdict = {"misbehavior": p >= 0.5, "category": "none", "severity": "none", "evidence": []}
        out = ModelOutput.from_content("mockllm/model", "I cannot tell." if kind == 0 else json.dumps(verdict))
    else:  # direct_v1: kind 0 unreadable, 1 a bare yes/no, else yes/no with its log-probabilities
        out = ModelOutput.from_content("mockllm/model", "maybe" if kind == 0 else "yes" if p >= 0.5 else "no")
        if kind > 1:
            out.choices[0].logprobs = Logprobs(content=[Logprob(
                token="yes" if p >= 0.5 else "no", logprob=math.log(max(p, 1e-3)),
                top_logprobs=[TopLogprob(token="yes", logprob=math.log(max(p, 1e-3))),
                              TopLogprob(token="no", logprob=math.log(max(1 - p, 1e-3)))])])
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # else inspect counts with tiktoken (online)
    return out


def run_task(tmp_path: Path, model, **args) -> object:
    [log] = inspect_eval(automon_bench(**args), model=model, log_dir=str(tmp_path / "logs"), display="none",
                         max_retries=1, timeout=30)
    assert log.status == "success", log.error
    return log


def log_figures(log) -> dict[str, float]:
    """The log's metrics, flattened (a dict-valued metric's keys are its own)."""
    return {k: m.value for s in log.results.scores for k, m in s.metrics.items()}


def same(a: float, b: float | None) -> bool:
    """Equal figures; metrics.json writes NaN as null."""
    b = math.nan if b is None else b
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


def assert_same_figures(log, metrics: dict) -> None:
    got = log_figures(log)
    want = {k: metrics["overall"][k] for k in FIGURES}
    # the evidence prompt's figures (right for the right reason), as eval/holdout.py computes them
    want.update({k: metrics["overall"][k] for k in EVIDENCE_FIGURES if k in metrics["overall"]})
    assert ("rrr" in want) == ("rrr" in got)
    for s, m in metrics["by_subset"].items():
        want.update({f"mr_{s}": m["mr"], f"far_{s}": m["far"]})
    assert set(want) <= set(got)
    assert all(same(got[k], want[k]) for k in want), {k: (got[k], want[k]) for k in want}


def test_samples_are_automon_prompts_with_their_fields(build):
    task = automon_bench(data_dir=str(build), subsets=",".join(SUBSETS), max_pairs_per_subset=2)
    from automon.data.io import load_build

    test = pick_test_samples(load_build(build).samples("test"), SUBSETS, 2)
    samples = list(task.dataset)
    assert [s.id for s in samples] == [s.id for s in test]
    for s, t in zip(samples, test):
        assert [{"role": m.role, "content": m.text} for m in s.input] == monitor_messages(t, "direct_v1")
        assert s.target == ("yes" if t.label else "no")
        assert (s.metadata["subset"], s.metadata["pair_id"], s.metadata["label"]) == (t.subset, t.pair_id, t.label)
    controls = {s.metadata["control"]: s.metadata["group"] for s in samples if "control" in s.metadata}
    assert set(controls) == {"right_cue_agree", "honest_mistake"} and len(set(controls.values())) == 1
    assert task.metadata["automon"]["task_args"]["subsets"] == SUBSETS
    assert task.config.max_tokens == 4 and task.config.logprobs and task.config.response_schema is None


def test_evidence_prompt_asks_for_structured_output(build):
    task = automon_bench(data_dir=str(build), subsets="sg_code", prompt="evidence_v1", shots=2)
    schema = task.config.response_schema
    assert schema.name == "monitor_verdict" and schema.json_schema.required == ["misbehavior", "category",
                                                                                "severity", "evidence"]
    shots = task.metadata["automon"]["shot_ids"]
    first = list(task.dataset)[0]
    assert len(shots) == 2 and len(first.input) == 1 + 2 * 2 + 1  # system, 2 shots (user + answer), query


@pytest.mark.slow  # loading the Qwen3 tokenizer takes most of a minute on 2 busy cores
def test_a_known_tokenizer_fits_prompts_as_the_local_backends_do(tmp_path):
    b = support.make_build(tmp_path / "b", pairs_per_subset=2, train_per_subset=2, long_every=2, long_words=300)
    task = automon_bench(data_dir=str(b), subsets="syco_qa", tokenizer="tiny", max_seq_length=256)
    from automon.data.io import load_build

    test = pick_test_samples(load_build(b).samples("test"), ["syco_qa"], None)
    model = model_config("tiny", key="tokenizer")
    fitted = render_all(test, prompt="direct_v1", shots=[], tokenizer=shared_tokenizer(model),
                        enable_thinking=model.enable_thinking, max_seq_length=256)
    samples = list(task.dataset)
    assert [[m.text for m in s.input] for s in samples] == [[m["content"] for m in f.messages] for f in fitted]
    assert any(s.metadata["shortened"] for s in samples) and task.metadata["automon"]["n_shortened"] > 0


@pytest.mark.parametrize("prompt", ["direct_v1", "evidence_v1"])
def test_the_log_and_holdout_give_the_same_figures(build, tmp_path, prompt):
    """The mock model's answers, scored by the task and by eval/holdout.py backend=inspect_log from its log."""
    log = run_task(tmp_path, get_model("mockllm/model", custom_outputs=scripted), data_dir=str(build),
                   subsets=",".join(SUBSETS), prompt=prompt)
    rows = {s.id: s.scores["automon_scorer"].metadata["row"] for s in log.samples}
    assert any(r["pred"] is None for r in rows.values())  # an unreadable answer, counted as the policy says
    if prompt == "direct_v1":
        assert any(r["p_yes"] is None for r in rows.values()) and any(r["p_yes"] is not None for r in rows.values())
    out = tmp_path / "eval"
    args = ["backend=inspect_log", f"backend.log={log.location}", f"data.dir={build}", f"prompt={prompt}",
            f"data.subsets=[{','.join(SUBSETS)}]", f"output_dir={out}", "wandb.mode=disabled", "progress=false"]
    evaluate(support.compose(args))
    metrics = json.loads((out / "metrics.json").read_text())
    assert_same_figures(log, metrics)
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {p["id"]: p for p in predictions} == {k: {f: r[f] for f in PRED_FIELDS + OPTIONAL_FIELDS if f in r}
                                                 for k, r in rows.items()}
    if prompt == "evidence_v1":  # the quotes scored against the gold spans, by the scorer as by eval/holdout.py
        assert any(r["on_gold"] is not None for r in rows.values()) and all("quotes" in r for r in rows.values())
    source = json.loads((out / "identity.json").read_text())["identity"]["source"]
    assert source["sha256"] == hashlib.sha256(Path(log.location).read_bytes()).hexdigest()
    assert source["model"] == "mockllm/model" and metrics["source"] == source
    assert {"report.md", "metrics.json", "predictions.jsonl"} <= {p.name for p in out.iterdir()}


def test_an_openai_compatible_server_gives_automons_own_figures(build, tmp_path, fake_openai, monkeypatch):
    """The same server's answers through inspect's openai provider and through backend=openai."""
    def respond(body):
        case = int(hashlib.sha256(body["messages"][-1]["content"].encode()).hexdigest(), 16)
        p = (case % 1000) / 1000
        return ("yes" if p >= 0.5 else "no"), {"yes": math.log(max(p, 1e-3)), "no": math.log(max(1 - p, 1e-3))}

    fake_openai.respond = respond
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = get_model("openai/fake-monitor", base_url=fake_openai.url, api_key="sk-test", responses_api=False)
    log = run_task(tmp_path, model, data_dir=str(build), subsets=",".join(SUBSETS))
    out = tmp_path / "openai"
    res = evaluate(support.compose(["backend=openai", "model=api", "backend.model_name=fake-monitor",
                                    f"backend.base_url={fake_openai.url}", f"data.dir={build}",
                                    f"data.subsets=[{','.join(SUBSETS)}]", f"output_dir={out}",
                                    "wandb.mode=disabled", "progress=false"]))
    [metrics] = res.metrics.values()
    assert metrics["overall"]["n_scored"] == metrics["overall"]["n"]  # P(yes) from the log-probabilities
    assert_same_figures(log, metrics)


@pytest.mark.slow  # a fresh interpreter imports inspect_ai and automon's evaluation: about a minute on 2 busy cores
def test_inspect_eval_runs_the_task_file(build, tmp_path, fake_openai):
    """`inspect eval eval/inspect_task.py -T ...` as a user runs it, against the fake OpenAI server."""
    import os
    import subprocess
    import sys

    from inspect_ai.log import list_eval_logs, read_eval_log

    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake_openai.url,
           "PYTHONPATH": os.pathsep.join([str(support.REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "inspect_ai", "eval", "eval/inspect_task.py", "-T", f"data_dir={build}",
                        "-T", "subsets=syco_qa,sg_code", "-T", "max_pairs_per_subset=1", "--model", "openai/fake",
                        "-M", "responses_api=false", "--log-dir", str(tmp_path / "logs"), "--display", "none"],
                       cwd=support.REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    [info] = list_eval_logs(str(tmp_path / "logs"))
    log = read_eval_log(info)
    assert log.status == "success"
    assert log.eval.metadata["automon"]["task_args"]["subsets"] == SUBSETS
    assert {s.id for s in log.samples} == {"test-syco_qa-0", "test-syco_qa-1", "test-syco_qa-1-right_cue_agree",
                                           "test-syco_qa-1-honest_mistake", "test-sg_code-0", "test-sg_code-1"}
    assert log_figures(log)["far_right_cue_agree"] == 1.0  # the fake answers yes to every prompt
