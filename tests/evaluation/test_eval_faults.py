"""eval/holdout.py under faults and bad input (docs/errors.md): damaged adapters, adapters of
another build, bad samples, a full disk while rewriting results, sweeps with unfinished runs. Each ends
in one `error:` line (exit 2) or a bannered result; nothing is lost."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil

import pytest

from support import compose, cpu_overrides, make_adapter, make_build, one_error_line, rewrite_split, run_holdout
import torch

from automon.adapter_meta import AdapterError, check_adapter_files, nonfinite_tensors
from automon.data.io import load_build
from automon.evaluation import evaluate
from automon.evaluation.errors import EvalError
from automon.evaluation.monitors import resolve_monitors
from automon.evaluation.status import status as eval_status
from automon.schema import SampleError

TINY = ["data.subsets=[safety_qa,sg_code]"]  # two subsets, one pair each: seconds on the tiny model


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=1, train_per_subset=2)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, build):
    """An adapter that records `build` as its training data, as train/sft.py writes it."""
    return make_adapter(tmp_path_factory.mktemp("a") / "run" / "adapter",
                        data_manifest_hash=load_build(build).manifest_hash)


def _copy_adapter(adapter, dst):
    shutil.copytree(adapter, dst)
    return dst


# ---------------------------------------------------------------- damaged adapters

@pytest.mark.parametrize("damage", ["empty", "truncated", "random"])
def test_damaged_adapter_weights_areone_error_line(tmp_path, build, adapter, damage):
    ad = _copy_adapter(adapter, tmp_path / "run" / "adapter")
    w = ad / "adapter_model.safetensors"
    data = w.read_bytes()
    w.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "random": os.urandom(4096)}[damage])
    with pytest.raises(AdapterError, match="not a complete safetensors file"):
        resolve_monitors(compose(cpu_overrides(build, tmp_path / "o", f"adapter={ad}")))
    if damage == "truncated":  # the real command: one line, exit 2, nothing written
        one_error_line(run_holdout(*cpu_overrides(build, tmp_path / "o", f"adapter={ad}")),
                        "adapter_model.safetensors is not a complete safetensors file", "retrain it")
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_an_adapter_with_nan_or_inf_weights_is_refused(tmp_path, build, adapter, value):
    """A diverged training's adapter scored every sample alike: MR = FAR = 1.0 with exit 0."""
    from safetensors.torch import load_file, save_file

    d = _copy_adapter(adapter, tmp_path / "run" / "adapter")
    w = load_file(d / "adapter_model.safetensors")
    name = sorted(w)[3]
    w[name][0, 0] = float(value)
    save_file(w, d / "adapter_model.safetensors")
    with pytest.raises(AdapterError, match="holds inf or NaN in 1 tensor"):
        check_adapter_files(d)
    one_error_line(run_holdout(*cpu_overrides(build, tmp_path / "o", *TINY, f"adapter={d}")), "inf or NaN",
                   "training diverged", "lower train.lr")
    for dtype in (torch.bfloat16, torch.float16):  # the exponent test of each float width
        save_file({k: v.to(dtype) for k, v in w.items()}, d / "adapter_model.safetensors")
        assert nonfinite_tensors(d / "adapter_model.safetensors") == [name]


def test_lora_weights_of_another_rank_than_the_config_are_refused(tmp_path, build, adapter):
    ad = _copy_adapter(adapter, tmp_path / "a" / "adapter")
    cfg = json.loads((ad / "adapter_config.json").read_text())
    (ad / "adapter_config.json").write_text(json.dumps({**cfg, "r": 16}))  # the weights are rank 8
    with pytest.raises(AdapterError, match=r"the LoRA weights have rank 8 .* says r=16"):
        resolve_monitors(compose(cpu_overrides(build, tmp_path / "o", f"adapter={ad}")))
    ad2 = _copy_adapter(adapter, tmp_path / "b" / "adapter")
    meta = json.loads((ad2 / "automon_adapter.json").read_text())
    (ad2 / "automon_adapter.json").write_text(json.dumps({**meta, "lora_rank": 32}))
    with pytest.raises(AdapterError, match="lora_rank=32 but adapter_config.json says r=8"):
        resolve_monitors(compose(cpu_overrides(build, tmp_path / "o", f"adapter={ad2}")))


def test_truncated_automon_adapter_json_isone_error_line(tmp_path, build, adapter):
    ad = _copy_adapter(adapter, tmp_path / "run" / "adapter")
    text = (ad / "automon_adapter.json").read_text()
    (ad / "automon_adapter.json").write_text(text[: len(text) // 2])
    one_error_line(run_holdout(*cpu_overrides(build, tmp_path / "o", f"adapter={ad}")),
                    "automon_adapter.json cannot be read", str(ad / "automon_adapter.json"), "retrain it")


@pytest.mark.parametrize("field, value, needle", [
    ("lora_rank", "abc", "lora_rank='abc', not an int"),
    ("lora_rank", 0, "lora_rank=0, not a rank >= 1"),
    ("enable_thinking", "no", "enable_thinking='no', not a bool"),
    ("prompt", 3, "prompt=3, not a str"),
])
def test_automon_adapter_json_of_the_wrong_types_is_one_error_line(tmp_path, build, adapter, field, value, needle):
    ad = _copy_adapter(adapter, tmp_path / "run" / "adapter")
    meta = json.loads((ad / "automon_adapter.json").read_text())
    (ad / "automon_adapter.json").write_text(json.dumps({**meta, field: value}))
    with pytest.raises(AdapterError, match=re.escape(needle)):
        check_adapter_files(ad)
    if field == "lora_rank" and value == "abc":
        one_error_line(run_holdout(*cpu_overrides(build, tmp_path / "o", f"adapter={ad}")), needle, "retrain it")


def test_adapter_may_name_a_file_in_the_adapter_dir(tmp_path, build, adapter):
    (m,) = resolve_monitors(compose(cpu_overrides(build, tmp_path / "o",
                                                  f"adapter={adapter / 'adapter_model.safetensors'}")))
    assert m.artifact_dir == adapter and m.name == "run"
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(EvalError, match="is a file, not an adapter directory.*pass the directory that holds"):
        resolve_monitors(compose(cpu_overrides(build, tmp_path / "o", f"adapter={tmp_path / 'notes.txt'}")))


# ---------------------------------------------------------------- the data

def test_adapter_of_another_build_is_refused_or_marked_contaminated(tmp_path, build, adapter):
    other = tmp_path / "other"
    shutil.copytree(build, other)
    m = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**m, "seed": 7}))  # another build, same test samples
    ov = cpu_overrides(other, tmp_path / "o", f"adapter={adapter}", *TINY)
    with pytest.raises(EvalError, match="trained on another data build than data.dir=.*allow_other_build=true"):
        evaluate(compose(ov))
    assert not (tmp_path / "o").exists()
    res = evaluate(compose([*ov, "allow_other_build=true"]))
    doc = res.metrics[res.monitors[0].name]
    assert doc["caveats"][0].startswith("CONTAMINATED (other build): adapter run was trained on")
    report = (tmp_path / "o" / "report.md").read_text().splitlines()
    assert report[2] == "**Read this first:**" and report[4].startswith("- **CONTAMINATED (other build)")
    # on its own build: no note
    res = evaluate(compose(cpu_overrides(build, tmp_path / "o2", f"adapter={adapter}", *TINY)))
    assert not any("CONTAMINATED" in n for n in res.metrics[res.monitors[0].name]["caveats"])


def test_a_label_other_than_0_or_1_is_never_scored(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    rewrite_split(b, "test", lambda rows: rows[1].update(label=2))
    with pytest.raises(SampleError, match=r"label must be 0 or 1, got 2"):
        evaluate(compose(cpu_overrides(b, tmp_path / "o")))
    one_error_line(run_holdout(*cpu_overrides(b, tmp_path / "o")), "label must be 0 or 1, got 2",
                    f"{b / 'test.jsonl'}:2", "rebuild it")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("edit, needle", [
    (lambda rows: rows[1].update(label=1, evidence=[rows[1]["response"][:8]]), "has 2 sample(s) with labels [1, 1]"),
    (lambda rows: rows[1].update(pair_id="lonely"), "has 1 sample(s) with labels [1]"),
    (lambda rows: rows[1].update(request=rows[1]["request"] + " Or another one?"),
     "pair_id 'test-safety_qa-p0' has two requests (ids test-safety_qa-0, test-safety_qa-1: they differ from character"),
])
def test_a_test_pair_that_is_not_one_benign_and_one_misbehaving_sample_is_refused(tmp_path, build, edit, needle):
    """A twin pair with two misbehavior labels, or twins of two requests (manifest updated), was scored
    as a pair."""
    b = tmp_path / "b"
    shutil.copytree(build, b)
    rewrite_split(b, "test", edit)
    with pytest.raises(SampleError, match="not a twin pair"):
        load_build(b).samples("test")
    one_error_line(run_holdout(*cpu_overrides(b, tmp_path / "o", *TINY)), "not a twin pair", needle,
                   f"{b / 'test.jsonl'}:", "rebuild it")


def test_manifest_of_the_wrong_shape_isone_error_line(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    (b / "manifest.json").write_text("[1, 2, 3]")
    one_error_line(run_holdout(*cpu_overrides(b, tmp_path / "o")), "is a JSON list, not an object", "rebuild it")


def test_output_dir_may_not_be_the_data_build(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    before = sorted(p.name for p in b.iterdir())
    with pytest.raises(EvalError, match="output_dir=.* is the data build"):
        evaluate(compose(cpu_overrides(b, b)))
    with pytest.raises(EvalError, match="is inside the data build"):
        evaluate(compose(cpu_overrides(b, b / "evals")))
    assert sorted(p.name for p in b.iterdir()) == before


def _files(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_output_dir_may_not_be_a_training_run_or_a_folder_of_other_files(tmp_path, build, adapter):
    """Publishing would replace config.yaml, metrics.json and report.md: a training run (which could then
    no longer resume) and the user's own folder are refused before anything is written."""
    run = adapter.parent  # <run>/adapter: evaluate it into its own run dir
    (run / "run.json").write_text(json.dumps({"format": "automon-train-run-v1", "status": "complete",
                                              "subsets": ["safety_code"], "data_manifest_hash": "x"}))
    (run / "config.yaml").write_text("train: {lr: 0.005}\n")
    before = _files(run)
    one_error_line(run_holdout(*cpu_overrides(build, run, *TINY, f"adapter={adapter}")),
                   "is a training run's directory", "choose another output_dir=")
    assert _files(run) == before
    paper = tmp_path / "paper"
    paper.mkdir()
    for name in ("report.md", "config.yaml", "metrics.json", "draft.tex"):
        (paper / name).write_text(f"the user's {name}\n")
    before = _files(paper)
    with pytest.raises(EvalError, match="holds files that are not an evaluation's.*draft.tex"):
        evaluate(compose(cpu_overrides(build, paper, *TINY)))
    assert _files(paper) == before
    from automon.evaluation.publish import staged_outputs  # the same refusal where outputs are published

    with pytest.raises(EvalError, match="not an evaluation's"):
        with staged_outputs(paper) as stage:
            (stage / "report.md").write_text("new")
    assert _files(paper) == before


def test_output_dir_with_only_a_cache_or_the_pipeline_record_is_an_evaluation_s(tmp_path, build):
    out = tmp_path / "o"
    (out / "pipeline" / "logs").mkdir(parents=True)
    (out / "pipeline" / "pipeline_state.json").write_text("{}")
    evaluate(compose(cpu_overrides(build, out, *TINY)))  # a killed first run leaves cache/ too
    for p in out.iterdir():  # what a first run killed while scoring leaves: its cache (and the pipeline's)
        if p.is_file():
            p.unlink()
    assert sorted(p.name for p in out.iterdir()) == ["cache", "pipeline"]
    evaluate(compose(cpu_overrides(build, out, *TINY)))
    assert (out / "identity.json").exists()


@pytest.mark.parametrize("setting, needle", [
    ("data.max_pairs_per_subset=-1", "data.max_pairs_per_subset=-1 is out of range"),  # dropped one pair
    ("data.max_pairs_per_subset=0", "data.max_pairs_per_subset=0 is out of range"),
    ("adapter=", "adapter= is empty; give a directory, or adapter=null for the base model"),  # scored the base
    ("output_dir=", "output_dir= is empty"),
    ("cache_dir=", "cache_dir= is empty"),
    ("bootstrap.seed=-1", "bootstrap.seed=-1 is out of range"),  # failed after scoring
    ("shots_seed=-1", "shots_seed=-1 is out of range"),
])
def test_out_of_range_and_empty_settings_are_refused_at_config_time(tmp_path, build, setting, needle):
    ov = [o for o in cpu_overrides(build, tmp_path / "o", *TINY) if o.split("=")[0] != setting.split("=")[0]]
    with pytest.raises(Exception, match=re.escape(needle)):
        compose([*ov, setting])
    if setting.startswith(("adapter", "bootstrap")):
        one_error_line(run_holdout(*ov, setting), needle)
        assert not (tmp_path / "o").exists()


def test_an_output_dir_that_is_a_symlink_loop_is_one_error_line(tmp_path, build):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    one_error_line(run_holdout(*cpu_overrides(build, tmp_path / "a" / "o", *TINY)), "symlink loop")


def test_wandb_online_without_a_key_is_refused_at_config_time(tmp_path, build, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    ov = [o for o in cpu_overrides(build, tmp_path / "o", *TINY) if not o.startswith("wandb.mode")]
    with pytest.raises(Exception, match="wandb.mode=online needs a wandb API key"):
        compose([*ov, "wandb.mode=online"])
    with pytest.raises(Exception, match="cannot write in wandb.dir="):
        compose([*ov, f"wandb.dir={build / 'manifest.json'}/w"])


def test_bootstrap_n_below_1_is_refused_at_config_time(tmp_path, build):
    with pytest.raises(Exception, match="bootstrap.n must be >= 1"):
        compose(cpu_overrides(build, tmp_path / "o", "bootstrap.n=0"))
    one_error_line(run_holdout(*cpu_overrides(build, tmp_path / "o", "bootstrap.n=0")), "bootstrap.n=0",
                    "bootstrap.n must be >= 1")


# ---------------------------------------------------------------- nothing lost

def _snapshot(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and "cache" not in p.relative_to(d).parts}


@pytest.mark.parametrize("where", ["report", "predictions"])
def test_disk_full_while_rewriting_leaves_the_earlier_results_whole(tmp_path, build, monkeypatch, where):
    out = tmp_path / "o"
    ov = cpu_overrides(build, out, *TINY)
    evaluate(compose(ov))
    before = _snapshot(out)
    assert "identity.json" in before and eval_status(compose(ov)).current

    import automon.evaluation.outputs as outputs
    import automon.report.markdown as markdown

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "report.md"))

    if where == "report":  # after predictions.jsonl and metrics.json were written
        monkeypatch.setattr(markdown, "monitor_report", full)
    else:
        monkeypatch.setattr(outputs, "write_predictions", full)
    with pytest.raises(EvalError, match="No space left on device.*free some space.*are unchanged"):
        evaluate(compose([*ov, "threshold=0.4"]))  # a new config: its config.yaml must not land beside old metrics
    after = _snapshot(out)
    assert after.keys() == before.keys() and all(after[k] == before[k] for k in before), "the old set changed"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.staging-")]
    assert not list(out.rglob("*.tmp")) and eval_status(compose(ov)).current


def test_disk_full_in_the_prediction_cache_is_a_user_error(tmp_path, build, monkeypatch):
    from automon.backends.cache import PredictionCache

    def full(self, items):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(PredictionCache, "put_many", full)
    with pytest.raises(EvalError, match="cannot write the prediction cache: No space left on device.*cache_dir="):
        evaluate(compose(cpu_overrides(build, tmp_path / "o", *TINY)))


def test_sweep_lists_runs_it_could_not_score(tmp_path, build, adapter, caplog):
    sweep = tmp_path / "sweep"
    shutil.copytree(adapter, sweep / "done" / "adapter")
    (sweep / "killed").mkdir(parents=True)
    (sweep / "killed" / "config.yaml").write_text("train: {}\n")
    (sweep / "killed" / "run.json").write_text(json.dumps({"status": "running"}))
    (sweep / "notes").mkdir()  # not a training run: no word about it
    out = tmp_path / "o"
    res = evaluate(compose(cpu_overrides(build, out, f"sweep_dir={sweep}", "include_base=false", *TINY)))
    assert [m.name for m in res.monitors] == ["done"]
    line = "killed: no adapter (run status: running; rerun its train/sft.py command to finish it)"
    assert json.loads((out / "metrics.json").read_text())["not_scored"] == [line]
    report = (out / "report.md").read_text()
    assert "**Not scored: 1 training run(s) in the sweep have no adapter**" in report and f"- {line}" in report
    assert any("not scored: " + line in r.getMessage() for r in caplog.records)


def test_monitor_names_are_unique_after_sanitising(tmp_path, build, adapter):
    """Runs `run 1` and `run-1`, and a run dir named `base`, once collapsed into one monitor name: one
    matrix row twice and one cache file holding two monitors' scores."""
    sweep = tmp_path / "sweep"
    shutil.copytree(adapter, sweep / "run 1" / "adapter")
    make_adapter(sweep / "run-1" / "adapter", seed=1, data_manifest_hash=load_build(build).manifest_hash)
    shutil.copytree(adapter, sweep / "base" / "adapter")
    out = tmp_path / "o"
    res = evaluate(compose(cpu_overrides(build, out, f"sweep_dir={sweep}", *TINY)))
    names = [m.name for m in res.monitors]
    assert len(set(names)) == len(names) == 4 and names[0] == "base", names
    p_yes = {n: [json.loads(x)["p_yes"] for x in (out / "monitors" / n / "predictions.jsonl").read_text().splitlines()]
             for n in names}
    assert len({tuple(v) for v in p_yes.values()}) == 3  # the base model, adapter seed 0 (twice), seed 1
    assert p_yes[names[0]] != p_yes[names[1]]  # the base model is not the adapter in the dir named base
    cached = [f for f in (out / "cache").glob("*.jsonl")]
    assert len(cached) == 3  # keyed by content: the base model, adapter seed 0 (two copies share it), seed 1
    for f in cached:  # never two different monitors' scores in one file
        rows = [json.loads(x) for x in f.read_text().splitlines()[1:]]
        assert all(len({r["p_yes"] for r in rows if r["id"] == i}) == 1 for i in {r["id"] for r in rows}), f


def test_cache_rows_that_are_not_predictions_are_recomputed(tmp_path, build, caplog):
    """A cached p_yes of 7.5 was used (a 'yes'); "abc" or a row that is a list crashed."""
    out = tmp_path / "o"
    ov = cpu_overrides(build, out, *TINY)
    evaluate(compose(ov))  # fills the cache
    (f,) = (out / "cache").glob("*.jsonl")
    lines = f.read_text().splitlines()
    rows = [json.loads(x) for x in lines[1:]]
    bad = [dict(rows[0], p_yes=7.5), dict(rows[1], p_yes="abc"), [rows[2]["id"], 0.5],
           dict(rows[3], p_yes=float("nan"))]
    f.write_text(lines[0] + "\n" + "".join(json.dumps(r) + "\n" for r in bad))
    caplog.set_level("WARNING")
    again = evaluate(compose(ov))
    assert again.n_computed == 4 and again.n_cached == 0
    assert any("4 row(s) are not predictions and are recomputed" in r.getMessage() for r in caplog.records)
    got = [json.loads(x)["p_yes"] for x in (out / "predictions.jsonl").read_text().splitlines()]
    want = [r["p_yes"] for r in rows]
    assert sorted(got) == pytest.approx(sorted(want))


def test_cache_dir_that_is_a_file_or_a_cache_file_that_is_a_directory_fails_before_scoring(tmp_path, build):
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_error_line(run_holdout(*cpu_overrides(build, tmp_path / "o", *TINY, f"cache_dir={afile}")),
                   f"cannot write in cache_dir={afile}")
    from automon.backends.cache import CacheError, PredictionCache, key_hash

    key = {"k": 1}
    (tmp_path / "c" / f"{key_hash({'cache_version': 'predcache_v1', **key})}.jsonl").mkdir(parents=True)
    with pytest.raises(CacheError, match="cache file .* is a directory"):
        PredictionCache(tmp_path / "c", key)


def _holdout_interrupted(tmp_path, patch: str, *overrides: str):
    """eval/holdout.py with `patch` run first (it raises KeyboardInterrupt where Ctrl-C lands), from a
    script of its own (so that it runs warm, support.run_script)."""
    from support import HOLDOUT, holdout_env, run_script

    script = tmp_path / f"patched_holdout_{abs(hash(patch))}.py"
    script.write_text(f"import runpy, sys\n{patch}\n"
                      f"sys.argv = [{str(HOLDOUT)!r}, *sys.argv[1:]]\n"
                      "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    return run_script(script, *overrides, timeout=240, env=holdout_env())


def test_ctrl_c_in_the_evaluation_is_one_line_and_keeps_what_was_finished(tmp_path, build):
    """Ctrl-C in eval/holdout.py: one line, exit 130, no traceback; while scoring, the chunks scored so far
    stay cached and nothing is published; while publishing over an earlier evaluation, its files stay
    as they were (the staging dir is removed)."""
    out = tmp_path / "o"
    ov = [*cpu_overrides(build, out, *TINY), "backend.chunk_size=1"]
    second_chunk = ("import automon.backends.cache as c\n"
                    "put, calls = c.PredictionCache.put_many, []\n"
                    "def put_many(self, items):\n"
                    "    calls.append(1)\n"
                    "    if len(calls) == 2:\n"
                    "        raise KeyboardInterrupt\n"
                    "    return put(self, items)\n"
                    "c.PredictionCache.put_many = put_many")
    r = _holdout_interrupted(tmp_path, second_chunk, *ov)
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C)")
    assert sorted(p.name for p in out.iterdir()) == ["cache"]  # nothing published, the first chunk cached
    (f,) = (out / "cache").glob("*.jsonl")
    assert len(f.read_text().splitlines()) == 2  # the key line and the one prediction scored before Ctrl-C
    r = run_holdout(*ov)  # the same command carries on from the cache
    assert r.returncode == 0 and "3 predictions computed, 1 from cache" in r.stdout, r.stdout + r.stderr[-3000:]
    before = _snapshot(out)
    assert "identity.json" in before
    writing = ("import automon.evaluation.outputs as o\n"
               "def write_predictions(*a, **k):\n"
               "    raise KeyboardInterrupt\n"
               "o.write_predictions = write_predictions")
    r = _holdout_interrupted(tmp_path, writing, *ov, "threshold=0.4")  # a new config: it would replace config.yaml
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert _snapshot(out) == before and not [p for p in tmp_path.iterdir() if p.name.startswith(".o.staging-")]


def test_a_cache_file_of_another_identity_is_refused_not_read(tmp_path, build):
    """A cache file copied or renamed from another monitor's (its key line says whose it is) was read as
    this monitor's predictions: another model's scores, silently."""
    from automon.backends.base import JudgeResult
    from automon.backends.cache import CACHE_VERSION, CacheError, PredictionCache, key_hash

    theirs = PredictionCache(tmp_path / "c", {"k": 1})
    theirs.put_many([("a", "sha-a", JudgeResult(p_yes=0.9))])
    mine = tmp_path / "c" / f"{key_hash({'cache_version': CACHE_VERSION, 'k': 2})}.jsonl"
    shutil.copy(theirs.path, mine)
    with pytest.raises(CacheError, match=rf"{mine.name} holds the predictions of another identity.*remove it"):
        PredictionCache(tmp_path / "c", {"k": 2})
    odd = {"k": (1, 2), "t": float("nan"), "n": None}  # its own file opens again: the key as its line wrote it
    PredictionCache(tmp_path / "c", odd).put_many([("a", "sha-a", JudgeResult(p_yes=0.1))])
    assert PredictionCache(tmp_path / "c", odd).get("a", "sha-a").p_yes == 0.1
    out = tmp_path / "o"  # an evaluation's own cache file, its key line replaced by another identity's
    ov = cpu_overrides(build, out, *TINY)
    evaluate(compose(ov))
    (f,) = (out / "cache").glob("*.jsonl")
    lines = f.read_text().splitlines()
    head = json.loads(lines[0])
    f.write_text("\n".join([json.dumps({"key": {**head["key"], "adapter": "0" * 64}}, sort_keys=True),
                            *lines[1:]]) + "\n")
    with pytest.raises(CacheError, match="another identity"):
        evaluate(compose(ov))
