"""train/sft.py under faults and bad input (docs/errors.md): what overwrite=true may delete,
bad samples and settings, torn and damaged run files, a full disk. Each ends in one `error:` line
(exit 2) or a run that resumes; nothing is lost."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess

import pytest

from support import REPO, make_build, one_error_line, rewrite_split, run_script, run_sft, tiny_overrides
from automon.adapter_meta import check_adapter_files
from automon.data.io import BuildChanged, BuildNotFound, load_build, write_build
from automon.stage_status import Currency
from automon.training import rundir as rd
from automon.training.errors import TrainError

STEPS = 4


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("b") / "build", pairs_per_subset=1, train_per_subset=2)


def _ov(build, out, *extra):
    # checkpoints at steps 2 and 4 (the last): a damaged run can resume from either
    return tiny_overrides(build, out, "subset=sg_qa", f"train.max_steps={STEPS}", "train.save_steps=2", *extra)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, build):
    run = tmp_path_factory.mktemp("runs") / "R"
    r = run_sft(*_ov(build, run))
    assert r.returncode == 0, r.stderr[-3000:]
    return run


def _status(build, run):
    from support import CONF
    from hydra import compose, initialize_config_dir

    from automon.config.train import register
    from automon.training.status import status

    register()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return status(compose(config_name="sft", overrides=_ov(build, run)))


# ---------------------------------------------------------------- what output_dir may be

def test_output_dir_that_is_the_data_build_is_refused_and_kept(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    before = {p.name: p.read_bytes() for p in b.iterdir()}
    for extra in ((), ("overwrite=true",)):
        one_error_line(run_sft(*_ov(b, b, *extra)), f"output_dir={b} is the data build", "outside the data build")
    one_error_line(run_sft(*_ov(b, tmp_path, "overwrite=true")), "holds the data build")
    other = tmp_path / "other"
    shutil.copytree(build, other)  # another build as output_dir: also never deleted
    one_error_line(run_sft(*_ov(b, other, "overwrite=true")), "holds a data build (manifest.json)")
    assert {p.name: p.read_bytes() for p in b.iterdir()} == before and (other / "manifest.json").exists()


def test_a_folder_with_a_config_yaml_and_train_log_of_its_own_is_not_a_run(tmp_path, build):
    """A run is recognised by the run record only a run writes (run.json), never by generic file names:
    the user's own config.yaml and train.log are neither deleted (overwrite=true) nor called a run."""
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "config.yaml").write_text("my: notes\n")
    (exp / "train.log").write_text("my log\n")
    for extra in ((), ("overwrite=true",)):
        line = one_error_line(run_sft(*_ov(build, exp, *extra)), "no training run (no run.json", "config.yaml",
                              "train.log", "choose another output_dir=")
        assert "different config" not in line
    assert (exp / "config.yaml").read_text() == "my: notes\n" and (exp / "train.log").read_text() == "my log\n"
    assert sorted(p.name for p in exp.iterdir()) == ["config.yaml", "train.log"]
    assert _status(build, exp).state is Currency.STALE


def test_a_finished_run_is_a_run_by_its_record(finished):
    assert rd.is_run_dir(finished)
    assert json.loads((finished / "run.json").read_text())["format"] == rd.RUN_FORMAT
    assert rd.foreign_entries(finished) == []


def test_an_output_dir_that_is_a_symlink_loop_is_one_error_line(tmp_path, build):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    one_error_line(run_sft(*_ov(build, tmp_path / "a")), "output_dir=", "symlink loop", "choose another output_dir=")


# ---------------------------------------------------------------- bad settings and samples

@pytest.mark.parametrize("setting, needle", [
    ("train.warmup_ratio=2", "train.warmup_ratio=2.0 is out of range"),
    ("train.weight_decay=-1", "train.weight_decay=-1.0 is out of range"),
    ("train.save_total_limit=0", "train.save_total_limit=0 is out of range"),
])
def test_out_of_range_settings_are_refused_at_config_time(tmp_path, build, setting, needle):
    one_error_line(run_sft(*_ov(build, tmp_path / "r", setting)), needle)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("field, value, needle", [
    ("label", 2, "label must be 0 or 1, got 2"),
    ("label", True, "label must be 0 or 1, got True"),
    ("split", "test", "has split 'test' but is in the train file"),
    ("subset", "nope", "unknown subset 'nope'"),
])
def test_a_bad_sample_is_never_trained_on(tmp_path, build, field, value, needle):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    rewrite_split(b, "train", lambda rows: rows[2].update({field: value}))
    with pytest.raises(Exception, match="not a valid sample"):
        load_build(b).samples("train")
    if field == "label" and value == 2:
        one_error_line(run_sft(*_ov(b, tmp_path / "r")), needle, f"{b / 'train.jsonl'}:3", "rebuild it")


def test_manifest_of_the_wrong_shape_isone_error_line(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    mf = json.loads((b / "manifest.json").read_text())
    for bad, needle in (([1, 2], "is a JSON list, not an object"),
                        ({**mf, "files": 5}, "has no 'files' mapping"),
                        ({**mf, "counts": []}, "has 'counts' that is not an object")):
        (b / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(BuildNotFound, match=needle):
            load_build(b)
    one_error_line(run_sft(*_ov(b, tmp_path / "r")), "has 'counts' that is not an object", "rebuild it")


def test_empty_train_split_says_how_to_fix_it(tmp_path, build):
    whole = load_build(build)
    train = [s for s in whole.samples("train") if s.subset == "safety_qa"]
    b = tmp_path / "b"
    write_build(b, train, whole.samples("test"), {"seed": 0})
    one_error_line(run_sft(*_ov(b, tmp_path / "r")), "has no training samples for sg_qa",
                    "its train split has safety_qa", "subset=safety_qa", "subsets=[sg_qa]")


def test_a_list_of_subsets_needs_training_samples_of_each(tmp_path, build):
    """subset=[safety_qa,sg_code] on a build without sg_code training samples trained on safety_qa alone
    and recorded safety_qa+sg_code."""
    whole = load_build(build)
    b = tmp_path / "b"
    write_build(b, [s for s in whole.samples("train") if s.subset == "safety_qa"], whole.samples("test"), {"seed": 0})
    line = one_error_line(run_sft(*_ov(b, tmp_path / "r", "subset=[safety_qa,sg_code]")),
                          "no training samples for sg_code (of subset=safety_qa+sg_code)", "its train split has safety_qa")
    assert "subsets=[safety_qa,sg_code]" in line and not (tmp_path / "r").exists()
    # a manifest whose counts do not say so (a faulty writer): the samples themselves are checked too
    from automon.training.run import _refuse_missing_subsets

    with pytest.raises(TrainError, match="no training samples for sg_code"):
        _refuse_missing_subsets(whole, ["safety_qa", "sg_code"], "safety_qa+sg_code", {"safety_qa"})


def test_a_non_finite_loss_or_weight_stops_training_before_an_adapter_is_saved(tmp_path):
    """train.lr=inf trained to an all-NaN adapter with exit 0 (refused at config time now); a loss that
    becomes NaN anyway stops at its log line, and NaN weights are never saved."""
    import torch
    from types import SimpleNamespace

    from automon.training.callbacks import MetricsCallback
    from automon.training.run import _refuse_nonfinite_weights

    cb = MetricsCallback(tmp_path / "metrics.jsonl", None)
    cb.on_log(None, SimpleNamespace(global_step=1), None, logs={"loss": 1.5})
    with pytest.raises(TrainError, match="training diverged: the loss is nan at step 2"):
        cb.on_log(None, SimpleNamespace(global_step=2), None, logs={"loss": float("nan")})
    model = torch.nn.Linear(2, 2)
    _refuse_nonfinite_weights(model, tmp_path)
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    with pytest.raises(TrainError, match="1 trained weight tensor.*inf or NaN.*weight"):
        _refuse_nonfinite_weights(model, tmp_path)


def test_a_model_dir_without_tokenizer_files_is_one_error_line(tmp_path, build):
    """transformers loads such a directory as an empty tokenizer: a traceback came later, while rendering."""
    from support import tiny_path

    model = tmp_path / "model"
    shutil.copytree(tiny_path(), model, ignore=shutil.ignore_patterns("tokenizer*", "chat_template*"))
    one_error_line(run_sft(*_ov(build, tmp_path / "r", f"model.pretrained={model}"), env={"HF_HUB_OFFLINE": "1"}),
                   f"model directory {model} has no tokenizer files", "copy the tokenizer files")


def test_ctrl_c_saves_a_checkpoint_and_is_one_line(tmp_path, build):
    """Ctrl-C (SIGINT to the whole foreground process group, as a terminal sends it) was a KeyboardInterrupt
    traceback and lost the steps since the last checkpoint; it now checkpoints as SIGTERM does."""
    import os
    import signal

    from support import SFT, start_script

    run = tmp_path / "r"
    p = start_script(SFT, *_ov(build, run, "train.max_steps=400", "train.save_steps=1000"), stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = []
    for line in p.stdout:
        log.append(line)
        if " INFO step 3 " in line:
            os.killpg(p.pid, signal.SIGINT)
            break
    log.append(p.stdout.read())
    out = "".join(log)
    assert p.wait(timeout=120) == 130 and "Traceback" not in out, out[-3000:]
    assert "stopped by signal 2 after saving" in out and "rerun the same command to resume" in out
    assert rd.last_complete_checkpoint(run) is not None
    assert json.loads((run / "run.json").read_text())["status"] == "preempted"


def test_sha256_mismatch_tells_how_this_build_was_made(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    with open(b / "train.jsonl", "a") as f:
        f.write("\n")
    with pytest.raises(BuildChanged) as e:
        load_build(b).samples("train")
    assert "synthetic" in str(e.value) and "../shared/data/raw out=" not in str(e.value)
    mf = json.loads((b / "manifest.json").read_text())  # a build of real sources: its own sources.root
    del mf["synthetic_sources"]
    mf["config"] = {"sources": {"root": "/data/raw"}}
    (b / "manifest.json").write_text(json.dumps(mf))
    with pytest.raises(BuildChanged, match=f"python data_build/build.py sources.root=/data/raw out={b}"):
        load_build(b).samples("train")


# ---------------------------------------------------------------- damaged and torn run files

def _copy_run(finished, dst):
    shutil.copytree(finished, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def test_torn_last_metrics_line_is_dropped_and_the_run_resumes(tmp_path, build, finished, caplog):
    run = _copy_run(finished, tmp_path / "R")
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "status": "running"}))  # killed after checkpoint-2
    shutil.rmtree(run / "adapter")
    shutil.rmtree(run / "checkpoints" / f"checkpoint-{STEPS}")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "loss": 1.2')  # the write the kill cut short
    with caplog.at_level(logging.WARNING):
        assert [m["step"] for m in rd.read_metrics(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert "dropped a torn last line" in caplog.text
    r = run_sft(*_ov(build, run))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming from" in r.stderr and "dropped a torn last line" in r.stderr
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))
    check_adapter_files(run / "adapter")


def test_a_bad_metrics_line_before_the_last_names_file_and_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(TrainError, match=r"metrics.jsonl:2.*delete that line"):
        rd.read_metrics(p)


@pytest.mark.parametrize("damage", ["missing", "truncated", "meta"])
def test_a_damaged_adapter_is_not_current_and_the_rerun_writes_it_again(tmp_path, build, finished, damage):
    run = _copy_run(finished, tmp_path / "R")
    w = run / "adapter" / "adapter_model.safetensors"
    if damage == "missing":
        w.unlink()
    elif damage == "truncated":
        w.write_bytes(w.read_bytes()[:100])
    else:
        (run / "adapter" / "automon_adapter.json").write_text('{"base_model": "ti')
    st = _status(build, run)  # what pipeline.py asks
    assert st.state is Currency.RESUMABLE and "complete by run.json, but its adapter" in st.reason, st
    if damage == "truncated":
        r = run_sft(*_ov(build, run))
        assert r.returncode == 0, r.stderr[-3000:]
        check_adapter_files(run / "adapter")
        assert _status(build, run).current


def test_a_cut_optimizer_state_is_named_and_the_previous_checkpoint_resumes(tmp_path, build, finished, caplog):
    run = _copy_run(finished, tmp_path / "R")
    newest = rd.last_complete_checkpoint(run)
    assert newest is not None and newest.name == f"checkpoint-{STEPS}"
    opt = newest / "optimizer.pt"
    opt.write_bytes(opt.read_bytes()[: opt.stat().st_size // 2])
    caplog.set_level(logging.WARNING)
    assert rd.last_complete_checkpoint(run).name == "checkpoint-2"
    assert any("optimizer.pt is damaged or cut short" in r.getMessage() and f"checkpoint-{STEPS}" in r.getMessage()
               for r in caplog.records)
    (run / "adapter").rename(tmp_path / "gone")  # unfinished: the rerun resumes from checkpoint-2
    r = run_sft(*_ov(build, run))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "resuming from" in r.stderr and "checkpoint-2" in r.stderr and "optimizer.pt is damaged" in r.stderr


@pytest.mark.parametrize("name", ["metrics.jsonl", "run.json"])
def test_a_run_file_that_is_a_directory_is_one_error_line(tmp_path, build, finished, name):
    run = _copy_run(finished, tmp_path / "R")
    (run / name).unlink()
    (run / name).mkdir()
    (run / "adapter").rename(tmp_path / "gone")
    one_error_line(run_sft(*_ov(build, run)), "is a directory", name)


def test_a_manifest_that_is_a_directory_is_one_error_line(tmp_path, build):
    b = tmp_path / "b"
    shutil.copytree(build, b)
    (b / "manifest.json").unlink()
    (b / "manifest.json").mkdir()
    one_error_line(run_sft(*_ov(b, tmp_path / "r")), "manifest.json cannot be read (Is a directory)", "rebuild it")


def test_damaged_run_json_or_config_is_stale_not_a_traceback(tmp_path, build, finished):
    run = _copy_run(finished, tmp_path / "R")
    (run / "run.json").write_text('{"status": "compl')
    assert "holds a damaged run" in _status(build, run).reason
    one_error_line(run_sft(*_ov(build, run)), "holds a damaged run", "overwrite=true")


def test_disk_full_during_training_isone_error_line(tmp_path, build):
    """ENOSPC from the metrics file (as from a checkpoint) inside the real entry script."""
    code = ("import errno, runpy, sys\n"
            "import automon.training.callbacks as cb\n"
            "def full(self, *a, **k):\n"
            "    raise OSError(errno.ENOSPC, 'No space left on device', str(self.path))\n"
            "cb.MetricsCallback.on_log = full\n"
            f"sys.argv = [{str(REPO / 'train' / 'sft.py')!r}, *sys.argv[1:]]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    script = tmp_path / "sft_on_a_full_disk.py"  # a script, not `python -c`: run_script runs it warm
    script.write_text(code)
    r = run_script(script, *_ov(build, tmp_path / "r"))
    one_error_line(r, "cannot write the run: no space left on device", "metrics.jsonl", "free some space",
                    "resumes")
