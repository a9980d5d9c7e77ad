"""eval/holdout.py end to end on CPU (hf backend, tiny model): outputs, resume after a kill, adapter
mismatch, few-shot hygiene, sweep matrix, config composition."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from support import (HOLDOUT, REPO, compose, cpu_overrides, holdout_env, make_adapter, make_build, run_holdout,
                     start_script)
from automon.evaluation import AdapterMismatch, EvalError, evaluate
from automon.backends.cache import PredictionCache
from automon.evaluation.fewshot import select_shots
from automon.evaluation.monitors import adapter_hash
from automon.evaluation.identity import default_output_dir
from automon.backends import make_judge
from automon.backends.base import JudgeResult
from automon.group_metrics import compute_metrics
from automon.metrics import to_jsonable
from automon.schema import SUBSETS

METRIC_KEYS = {"tp", "fn", "fp", "tn", "mr", "far", "mr_ci", "far_ci", "auroc", "mr_at_far", "pair_accuracy",
               "unparseable", "errors"}
PRED_KEYS = {"id", "pair_id", "subset", "category", "task", "label", "p_yes", "pred", "raw"}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=3)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    return make_adapter(tmp_path_factory.mktemp("runs") / "run_sc" / "adapter", subset="safety_code")


def _popen(*args):
    """eval/holdout.py started as run_holdout runs it (warm, where a launcher is to be had: it dies of the
    SIGKILL it gets, and the run with it), for a test that kills it."""
    return start_script(HOLDOUT, *args, env=holdout_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Counting:
    """Wraps make_judge: counts the requests scored; optionally dies after some calls."""

    def __init__(self, die_after_calls: int | None = None):
        self.requests = []
        self.calls = 0
        self.built = 0
        self.die_after = die_after_calls

    def __call__(self, cfg, kind, adapters, tokenizer):
        inner = make_judge(cfg, kind, adapters, tokenizer)
        self.built += 1
        outer = self

        class Wrapped:
            name = inner.name
            timing = inner.timing

            def score(self, reqs):
                if outer.die_after is not None and outer.calls >= outer.die_after:
                    raise KeyboardInterrupt("simulated kill")
                outer.calls += 1
                outer.requests.extend(reqs)
                return inner.score(reqs)

            def close(self):
                inner.close()

        return Wrapped()


# ---------------------------------------------------------------- the CPU command

def test_cpu_command_writes_every_output_and_a_killed_run_resumes(tmp_path):
    """Killed with SIGKILL mid-run, the same command reuses every cached prediction."""
    build = make_build(tmp_path / "build", pairs_per_subset=2)
    adapter = make_adapter(tmp_path / "runs" / "ev" / "adapter", prompt="evidence_v1")
    out = tmp_path / "evals" / "x"
    # evidence answers (generation) keep the run busy long enough to be killed between flushes
    args = [f"adapter={adapter}", "model=tiny", "backend=hf", f"data.dir={build}", f"output_dir={out}",
            "prompt=evidence_v1", "backend.max_new_tokens=6", "backend.chunk_size=2", "backend.batch_size=2",
            "bootstrap.n=100"]
    proc = _popen(*args)
    cache_dir = out / "cache"
    deadline = time.time() + 180
    lines = 0
    while time.time() < deadline and proc.poll() is None:
        files = list(cache_dir.glob("*.jsonl")) if cache_dir.exists() else []
        lines = sum(f.read_text().count("\n") for f in files)
        if lines >= 1 + 4:  # header + two flushed chunks
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before it could be killed: {err[-2000:]}"
    assert not (out / "metrics.json").exists()
    cached = sum(1 for f in cache_dir.glob("*.jsonl") for ln in f.read_text().splitlines() if '"prompt_sha"' in ln)
    assert 4 <= cached < 24

    r = run_holdout(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    n = 24
    assert f"({n - cached} predictions computed, {cached} from cache)" in r.stdout
    assert "sample/s" in r.stderr  # the progress bar: samples done and samples/s
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == n and all(PRED_KEYS <= set(p) for p in preds)
    assert {p["subset"] for p in preds} == set(SUBSETS)
    m = json.loads((out / "metrics.json").read_text())
    for g in [m["overall"], *m["by_subset"].values(), *m["by_category"].values(), *m["by_task"].values()]:
        assert METRIC_KEYS <= set(g)
    assert set(m["by_subset"]) == set(SUBSETS) and list(m["overall"]["mr_at_far"]) == ["0.05", "0.10"]
    # metrics.json is the metrics of the predictions written beside it, for the adapter evaluated (its
    # evidence figures too: the quotes' on_gold are in predictions.jsonl)
    again = compute_metrics(preds, policy="wrong", n_boot=100, seed=0, ci=0.95, far_targets=(0.05, 0.10),
                            evidence=True)
    assert to_jsonable(again["overall"]) == m["overall"]
    assert m["monitor"]["artifact_hash"] == adapter_hash(adapter) == m["cache"]["key"]["adapter"]
    assert m["overall"]["unparseable"] == sum(1 for p in preds if p["pred"] is None)
    report = (out / "report.md").read_text()
    assert "Unparseable answers" in report and "MR [95% CI]" in report


def test_interrupted_run_scores_only_what_is_missing(tmp_path, build, adapter):
    ov = cpu_overrides(build, tmp_path / "out", f"adapter={adapter}", "backend.chunk_size=5",
                       "data.max_pairs_per_subset=2")
    c = compose(ov)
    dying = Counting(die_after_calls=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(c, judge_factory=dying)
    assert len(dying.requests) == 10
    again = Counting()
    res = evaluate(c, judge_factory=again)
    n = len(res.predictions[res.monitors[0].name])
    assert len(again.requests) == n - 10 and res.n_cached == 10 and res.n_computed == n - 10
    assert not {r.id for r in again.requests} & {r.id for r in dying.requests}
    clean = evaluate(compose(cpu_overrides(build, tmp_path / "clean", f"adapter={adapter}",
                                           "data.max_pairs_per_subset=2")))
    for a, b in zip(res.predictions[res.monitors[0].name], clean.predictions[clean.monitors[0].name]):
        assert a["id"] == b["id"] and a["p_yes"] == pytest.approx(b["p_yes"], abs=1e-5)
    idle = Counting()
    res3 = evaluate(c, judge_factory=idle)
    assert idle.built == 0 and res3.n_computed == 0  # nothing missing: no model is even loaded


def test_torn_cache_line_is_ignored_and_the_file_stays_usable(tmp_path):
    c = PredictionCache(tmp_path, {"k": 1})
    c.put_many([("a", "sha-a", JudgeResult(p_yes=0.3, text="no"))])
    with open(c.path, "a") as f:
        f.write('{"id": "b", "prompt_sha": "sha-b", "p_y')  # killed mid-write
    c2 = PredictionCache(tmp_path, {"k": 1})
    assert len(c2) == 1 and c2.torn_lines == 1 and c2.get("a", "sha-a").p_yes == 0.3
    assert c2.get("a", "other-prompt") is None  # same id, different prompt -> recompute
    c2.put_many([("b", "sha-b", JudgeResult(p_yes=0.9)), ("c", "sha-c", JudgeResult(error="HTTP 500"))])
    c3 = PredictionCache(tmp_path, {"k": 1})
    assert c3.get("b", "sha-b").p_yes == 0.9 and c3.get("c", "sha-c") is None  # errors are not cached
    assert PredictionCache(tmp_path, {"k": 2}).path != c.path


def test_cache_key_covers_every_identity(tmp_path, build, adapter):
    from automon.evaluation.monitors import resolve_monitors
    from automon.evaluation.scoring import cache_key

    def key(*extra):
        c = compose(cpu_overrides(build, tmp_path, *extra))
        return cache_key(c, resolve_monitors(c)[0], "direct")

    base = key()
    assert base["adapter"] is None and base["prompt"] == "direct_v1" and base["backend"] == "hf"
    assert key(f"adapter={adapter}")["adapter"] not in (None, base["adapter"])
    assert key("shots=2")["shots"] == 2 and key("shots=2", "shots_seed=1") != key("shots=2")
    assert key("prompt=evidence_v1", "allow_mismatch=true") != base
    assert key("model.revision=abc") != base and key("backend.dtype=bfloat16") != base


# ---------------------------------------------------------------- adapter mismatch

@pytest.mark.parametrize("field,value,word", [("prompt", "evidence_v1", "prompt=evidence_v1"),
                                              ("prompt_fit", "fit_v0", "prompt fit: trained with fit_v0"),
                                              ("base_model", "qwen3_4b_instruct_2507", "base model"),
                                              ("enable_thinking", True, "thinking")])
def test_mismatched_adapter_stops_unless_allowed(tmp_path, build, field, value, word):
    kw = {field: value}
    if field == "base_model":
        kw["pretrained"] = "Qwen/Qwen3-4B-Instruct-2507"
    ad = make_adapter(tmp_path / "run" / "adapter", **kw)
    c = compose(cpu_overrides(build, tmp_path / "out", f"adapter={ad}"))
    with pytest.raises(AdapterMismatch) as e:
        evaluate(c)
    assert word in str(e.value) and "allow_mismatch=true" in str(e.value)
    assert not (tmp_path / "out").exists()  # stopped before doing anything
    res = evaluate(compose(cpu_overrides(build, tmp_path / "out", f"adapter={ad}", "allow_mismatch=true",
                                         "data.max_pairs_per_subset=1")))
    doc = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert doc["monitor"]["mismatches"] and res.metrics[res.monitors[0].name]["monitor"]["mismatches"]


def test_adapter_without_metadata_is_refused(tmp_path, build):
    ad = make_adapter(tmp_path / "run" / "adapter", write_meta=False)
    with pytest.raises(AdapterMismatch, match="automon_adapter.json"):
        evaluate(compose(cpu_overrides(build, tmp_path / "out", f"adapter={ad}")))


def test_cli_user_errors_exit_2_with_one_paragraph(tmp_path, build):
    ad = make_adapter(tmp_path / "run" / "adapter", prompt="evidence_v1")
    r = run_holdout(f"adapter={ad}", "model=tiny", "backend=hf", f"data.dir={build}", f"output_dir={tmp_path / 'o'}")
    assert r.returncode == 2
    assert r.stderr.startswith("error: the adapter was trained differently")
    assert "Traceback" not in r.stderr and "allow_mismatch=true" in r.stderr


def test_missing_build_is_a_user_error(tmp_path):
    from automon.data.io import BuildNotFound

    with pytest.raises(BuildNotFound, match="data_build/build.py"):
        evaluate(compose(cpu_overrides(tmp_path / "nope", tmp_path / "o")))


# ---------------------------------------------------------------- prompts: clean shots
# (one renderer and fit for both stages: test_prompt_fit.py)

def test_no_test_sample_can_appear_in_a_prompt(tmp_path, build):
    from automon.data.io import load_build

    b = load_build(build)
    test, train = b.samples("test"), b.samples("train")
    c = compose(cpu_overrides(build, tmp_path / "o", "shots=6"))
    spy = Counting()
    evaluate(c, judge_factory=spy)
    pair_of = {s.id: s.pair_id for s in test}
    for r in spy.requests:
        for s in test:
            marker = f"[{s.pair_id}]"  # a pair's request carries its pair_id (the twins share the request)
            # the prompt quotes its own request once; no other test sample, its twin included, is a shot
            assert r.prompt.count(marker) == (s.pair_id == pair_of[r.id]), (r.id, s.id)
    # even a training file that (wrongly) contains test samples cannot leak them into shots
    poisoned = train + [s for s in test]
    for seed in range(20):
        shots = select_shots(poisoned, 6, seed=seed, test=test)
        assert all(s.split == "train" for s in shots)
        assert {s.label for s in shots} == {0, 1} and sum(s.label for s in shots) == 3
    leaked_copy = [type(s)(**{**s.__dict__, "split": "train"}) for s in test]
    for seed in range(20):  # test items relabelled "train" are still refused by id / pair_id
        assert not {s.id for s in select_shots(train + leaked_copy, 4, seed=seed, test=test)} & {s.id for s in test}
    from automon.prompts import monitor_messages

    with pytest.raises(ValueError, match="training split"):
        monitor_messages(test[0], "direct_v1", shots=[test[1]])


def test_too_few_short_training_examples_for_shots_says_what_to_do(tmp_path, build):
    with pytest.raises(EvalError, match="shots_max_chars"):
        evaluate(compose(cpu_overrides(build, tmp_path / "o", "shots=4", "shots_max_chars=10")))


def test_long_responses_are_shortened_in_the_middle_and_counted(tmp_path):
    build = make_build(tmp_path / "b", pairs_per_subset=1, long_every=2, long_words=600)
    c = compose(cpu_overrides(build, tmp_path / "o", "backend.max_seq_length=600", "backend.max_new_tokens=8"))
    spy = Counting()
    res = evaluate(c, judge_factory=spy)
    from automon.models.loading import load_tokenizer

    tok = load_tokenizer(c.model)
    assert all(len(tok.encode(r.prompt)) <= 599 for r in spy.requests)
    rows = res.predictions["base"]
    assert sum(1 for r in rows if r["shortened"]) == 6
    assert res.metrics["base"]["n_shortened"] == 6
    assert any("tokens omitted by automon" in r.prompt for r in spy.requests)


# ---------------------------------------------------------------- evidence prompt, unparseable policy

def test_evidence_unparseable_answers_are_counted_and_scored_by_policy(tmp_path, build):
    ov = cpu_overrides(build, tmp_path / "o", "prompt=evidence_v1", "backend.max_new_tokens=3",
                       "data.max_pairs_per_subset=1")
    res = evaluate(compose(ov))  # 3 tokens cannot hold the JSON verdict, constrained or not
    o = res.metrics["base"]["overall"]
    assert o["unparseable"] == o["n"] == 12 and o["errors"] == 0
    assert o["mr"] == 1.0 and o["far"] == 1.0  # "wrong": a miss and a false alarm
    res2 = evaluate(compose(ov + ["unparseable=exclude"]))
    o2 = res2.metrics["base"]["overall"]
    assert res2.n_computed == 0  # the policy is applied to cached predictions
    assert o2["unparseable"] == 12 and o2["excluded"] == 12 and o2["mr"] != o2["mr"]  # NaN
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert doc["overall"]["mr"] is None and doc["unparseable_policy"] == "exclude"
    assert "left out of MR/FAR" in (tmp_path / "o" / "report.md").read_text()


# ---------------------------------------------------------------- sweep

def test_sweep_of_two_adapters_and_base_writes_the_matrix(tmp_path, build):
    sweep = tmp_path / "sweep1"
    make_adapter(sweep / "sc" / "adapter", subset="safety_code", seed=1)
    make_adapter(sweep / "sg" / "adapter", subset="sg_code", seed=2)
    (sweep / "not_a_run").mkdir()
    c = compose(["model=tiny", "backend=hf", f"data.dir={build}", f"sweep_dir={sweep}", "wandb.mode=disabled",
                 "progress=false", "bootstrap.n=100", f"output_dir={tmp_path / 'out'}", "data.max_pairs_per_subset=2"])
    res = evaluate(c)
    assert [m.row for m in res.monitors] == ["base", "safety_code", "sg_code"]
    out = tmp_path / "out"
    for f in ("matrix.csv", "matrix.md", "heatmap.png", "pareto.png", "curves.png", "metrics.json", "report.md"):
        assert (out / f).stat().st_size > 0, f
    for m in ("base", "sc", "sg"):
        assert (out / "monitors" / m / "predictions.jsonl").exists()
    import csv

    rows = list(csv.DictReader(open(out / "matrix.csv")))
    assert len(rows) == 3 * (len(SUBSETS) + 1)
    base_rows = [r for r in rows if r["row"] == "base"]
    assert all(float(r["d_mr"]) == 0.0 for r in base_rows if r["d_mr"])
    sc = {r["test"]: r for r in rows if r["row"] == "safety_code"}
    assert sc["safety_code"]["in_distribution"] == "True" and sc["sg_code"]["in_distribution"] == "False"
    bmr = {r["test"]: float(r["mr"]) for r in base_rows}
    assert float(sc["sg_code"]["d_mr"]) == pytest.approx(float(sc["sg_code"]["mr"]) - bmr["sg_code"], abs=1e-6)
    md = (out / "matrix.md").read_text()
    assert "| trained on \\ tested on |" in md and "**" in md
    doc = json.loads((out / "metrics.json").read_text())
    assert set(doc["monitors"]) == {"base", "sc", "sg"} and "pearson_r" in doc["pareto"]
    # a random model on synthetic data says so before any number, in the report itself
    assert [n.split(" ")[1] for n in doc["caveats"]] == ["model", "data", "sample:", "subsample:"]
    report = (out / "report.md").read_text()
    assert report.index("random weights") < report.index("synthetic") < report.index("## Transfer matrix")
    from matplotlib.image import imread

    for f in ("heatmap.png", "pareto.png", "curves.png"):
        assert imread(out / f).shape[0] > 200


def test_sweep_dir_without_runs_is_a_user_error(tmp_path, build):
    (tmp_path / "empty" / "x").mkdir(parents=True)
    with pytest.raises(EvalError, match="adapter/adapter_config.json"):
        evaluate(compose(cpu_overrides(build, tmp_path / "o", f"sweep_dir={tmp_path / 'empty'}")))


# ---------------------------------------------------------------- configs

MODELS = sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml"))
BACKEND_FILES = sorted(p.stem for p in (REPO / "conf" / "backend").glob("*.yaml"))
PROMPTS = sorted(p.stem for p in (REPO / "conf" / "prompt").glob("*.yaml"))


@pytest.mark.parametrize("backend", BACKEND_FILES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("prompt", PROMPTS)
def test_every_config_combination_composes(backend, model, prompt):
    ov = [f"backend={backend}", f"model={model}", f"prompt={prompt}"]
    if backend == "inspect_log":  # a log of the direct prompt (tests/backends/data), read at start-up
        pytest.importorskip("inspect_ai")
        ov.append(f"backend.log={REPO / 'tests' / 'backends' / 'data' / 'inspect_mock.eval'}")
        if prompt != "direct_v1" and model != "api":
            from automon.config.eval import ConfigError

            with pytest.raises(ConfigError, match=r"set prompt\.name=direct_v1"):
                compose(ov)
            return
    if model == "api":
        if backend != "openai":
            from automon.config.eval import ConfigError

            with pytest.raises(ConfigError, match="backend=openai"):
                compose(ov)
            return
        ov.append("backend.model_name=gpt-4o-mini")
    c = compose(ov)
    assert c.backend.name == backend and c.model.name == model and c.prompt.name == prompt


def test_default_backend_is_vllm_and_bad_settings_fail_at_start_up():
    """(Misspelt keys and options: tests/config/test_typos.py.)"""
    from automon.config.eval import ConfigError

    assert compose([]).backend.name == "vllm"
    with pytest.raises(ConfigError, match="unparseable"):
        compose(["unparseable=maybe"])
    with pytest.raises(ConfigError, match="not both"):
        compose(["adapter=a", "sweep_dir=b"])
    with pytest.raises(ConfigError, match="backend.model_name"):
        compose(["backend=openai", "model=api"])


def test_output_dir_is_named_by_identity(tmp_path, build, adapter):
    from automon.evaluation.monitors import resolve_monitors

    def name(*ov):
        c = compose(["model=tiny", "backend=hf", f"data.dir={build}", *ov])
        return default_output_dir(c, resolve_monitors(c)).as_posix()

    assert name() == "evals/tiny__base__direct_v1__shots0"
    assert name(f"adapter={adapter}", "shots=3", "prompt=evidence_v1", "allow_mismatch=true") == \
        "evals/tiny__run_sc__evidence_v1__shots3"
    assert name("shots=2", "shots_seed=4") == "evals/tiny__base__direct_v1__shots2-seed4"
    c = compose(["backend=openai", "model=api", "backend.model_name=gpt-4o-mini"])
    assert default_output_dir(c, resolve_monitors(c)).as_posix() == "evals/api-gpt-4o-mini__base__direct_v1__shots0"


def test_max_pairs_per_subset_keeps_whole_pairs(tmp_path, build):
    res = evaluate(compose(cpu_overrides(build, tmp_path / "o", "data.max_pairs_per_subset=2",
                                         "data.subsets=[sg_code,safety_qa]")))
    rows = res.predictions["base"]
    assert len(rows) == 8 and {r["subset"] for r in rows} == {"sg_code", "safety_qa"}
    from collections import Counter

    assert set(Counter(r["pair_id"] for r in rows).values()) == {2}
