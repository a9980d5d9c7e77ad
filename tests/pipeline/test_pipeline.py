"""The one-command pipeline (pipeline.py): the README's smoke run end to end, a second run that does
no work, and change detection (what is stale reruns, nothing else).

The smoke run is the literal `python pipeline.py experiment=smoke`, run from a temporary directory so
that its data/, runs/ and evals/ land there (about 2 minutes on 2 CPU cores; once per module).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import support
from automon.data.io import sha256_file

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "pipeline.py"
SUBSETS = ("safety_qa", "safety_code", "syco_qa", "syco_reasoning", "sg_qa", "sg_code")
SMOKE_TRAINED = ("safety_qa", "syco_qa", "sg_code")  # conf/experiment/smoke.yaml train.subsets
EVAL_FILES = ("report.md", "matrix.csv", "matrix.md", "heatmap.png", "pareto.png", "curves.png", "metrics.json")


def pipeline(cwd: Path, *overrides: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, float]:
    """`python pipeline.py <overrides>` in `cwd`, its stages run by a warm interpreter (`python=`, see
    _stage_python); returns the finished process and its seconds."""
    env = dict(os.environ, WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(PIPELINE), f"python={_stage_python(env)}", *overrides], cwd=cwd,
                       env=env, capture_output=True, text=True, timeout=timeout)
    return r, time.perf_counter() - t0


def _stage_python(env: dict[str, str]) -> str:
    """The `python` of the smoke experiment's stages: a launcher that runs each stage script in a child
    forked from an interpreter that has imported torch, transformers and TRL already, in the stages'
    environment: the pipeline's own while its entry point runs (automon.errors sets HYDRA_FULL_ERROR),
    its `env`, and PYTHONUNBUFFERED, as automon.pipeline.proc.base_env makes it. A stage whose
    environment is another one (parallel training sets OMP_NUM_THREADS where the test run has not)
    runs in a fresh interpreter all the same."""
    stage_env = {**env, "HYDRA_FULL_ERROR": "1", **_smoke_env()}
    stage_env.setdefault("PYTHONUNBUFFERED", "1")
    return support.warm_launcher(stage_env)


@functools.cache
def _smoke_env() -> dict[str, str]:
    """The smoke experiment's `env` (what the pipeline adds to its stages' environment)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from automon.config.pipeline import register

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        extra = OmegaConf.to_object(compose(config_name="pipeline", overrides=["experiment=smoke"])).env
    return {str(k): str(v) for k, v in extra.items()}


def _explain(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout (tail)\n{r.stdout[-6000:]}\n--- stderr (tail)\n{r.stderr[-4000:]}"


def _mtimes(work: Path) -> dict[str, int]:
    """mtime of every file the pipeline's stages (and the synthetic sources) wrote, except its own record."""
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in sorted(work.rglob("*"))
            if p.is_file() and "pipeline" not in p.relative_to(work).parts}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The README's main command, run once: (work dir, first-run output, seconds)."""
    work = tmp_path_factory.mktemp("smoke")
    r, secs = pipeline(work, "experiment=smoke")
    assert r.returncode == 0, _explain(r)
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("AUTOMON_TEST_COLD") != "1":
        # every stage ran warm (the workers set OMP_NUM_THREADS, so training's environment is the others')
        assert not support.warm_refused(), support.warm_refused()
    print(f"\nsmoke pipeline, first run: {secs:.1f} s")
    return work, r, secs


# ---------------------------------------------------------------- fast checks (no stage runs)

def test_configs_compose():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from automon.config.pipeline import PipelineConfig, register

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        for exp in ("smoke", "paper"):
            cfg = compose(config_name="pipeline", overrides=[f"experiment={exp}"])
            c = OmegaConf.to_object(cfg)
            assert isinstance(c, PipelineConfig) and c.name == exp
            assert c.build.out == f"data/builds/{exp}" and c.eval.out == f"evals/{exp}"
        paper = OmegaConf.to_object(compose(config_name="pipeline", overrides=["experiment=paper"]))
        assert paper.train.subsets == list(SUBSETS) + ["all"] and paper.eval.backend == "vllm"
        assert paper.sources.synthetic is False and paper.monitor.model == "qwen3_4b_instruct_2507"


def _smoke_pipeline(tmp_path: Path, *overrides: str, validated: bool = False):
    """The smoke experiment's Pipeline with its stage configs composed in-process (nothing runs); with
    `validated`, its settings checked first, as pipeline.py checks them."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from automon.config.pipeline import register
    from automon.pipeline.run import Pipeline

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        c = OmegaConf.to_object(compose(config_name="pipeline", overrides=["experiment=smoke", *overrides]))
    if validated:
        from automon.pipeline.checks import validate

        validate(c)
    p = Pipeline(c, REPO)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the stages' relative paths (data/builds/smoke, ...) resolve where pipeline.py runs
    try:
        p.preflight()
    finally:
        os.chdir(cwd)
    return p


def test_stage_commands_compose_to_the_configs_the_pipeline_checks(tmp_path):
    """The command the pipeline runs for a stage composes, in the stage's own process, to exactly the
    config the pipeline composed in-process and asked the stage's status about."""
    import yaml
    from omegaconf import OmegaConf

    p = _smoke_pipeline(tmp_path, 'train.extra_args=["train.logging_steps=7"]')
    r = p.train_runs["sg_code"]
    assert r.cfg.train.logging_steps == 7 and r.cfg.train.lr == 5e-3 and r.cfg.output_dir == "runs/smoke/sg_code"
    assert r.cfg.subset.include == {"sg_code": True} and r.cfg.model.name == "tiny"
    for run in (p.build_run, r, p.eval_run):
        cmd = run.command(sys.executable, REPO)
        assert cmd[:2] == [sys.executable, str(REPO / run.spec.script)] and cmd[2:] == run.overrides
        out = subprocess.run([*cmd, "--cfg", "job", "--resolve"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120, env=dict(os.environ, HF_HUB_OFFLINE="1"))
        assert out.returncode == 0, out.stderr[-2000:]
        assert yaml.safe_load(out.stdout) == OmegaConf.to_container(run.cfg, resolve=True), run.name


def test_a_non_ascii_name_is_quoted_for_the_stage_commands_too(tmp_path):
    """name='ñame' had to be quoted for the pipeline; its stages got runs/ñame/... unquoted, which Hydra
    cannot parse (their commands failed)."""
    p = _smoke_pipeline(tmp_path, "name='ñame vä'")
    r = p.train_runs["sg_code"]
    assert r.cfg.output_dir == "runs/ñame vä/sg_code" and p.eval_run.cfg.output_dir == "evals/ñame vä"
    assert "output_dir='runs/ñame vä/sg_code'" in r.overrides
    cmd = r.command(sys.executable, REPO)
    out = subprocess.run([*cmd, "--cfg", "job"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert out.returncode == 0 and "output_dir: runs/ñame vä/sg_code" in out.stdout, out.stderr[-2000:]


def test_further_evaluations_replace_the_main_ones_keys_and_compose(tmp_path):
    """eval.also: each further evaluation is the main one's overrides with its own merged in (a
    second backend= would be a Hydra error), writes to <eval.out>/<name>, and composes."""
    from automon.pipeline.stages import merge_overrides

    assert merge_overrides(["backend=hf", "a.b=1", "+c=2"], ["backend=probe", "c=3"]) == ["a.b=1", "backend=probe", "c=3"]
    p = _smoke_pipeline(tmp_path, "+eval.also.lex=['backend=probe','backend.features=lexical','sweep_dir=null']")
    r = p.eval_runs["eval lex"]
    assert r.cfg.backend.name == "probe" and r.cfg.backend.features == "lexical" and r.cfg.sweep_dir is None
    assert r.cfg.output_dir == "evals/smoke/lex" and r.cfg.model.name == "tiny"
    assert p.eval_run.cfg.backend.name == "hf" and list(p.eval_runs) == ["eval", "eval lex"]
    # an entry of another backend does not take the main's backend.<key> settings (smoke's
    # backend.batch_size=24 and max_seq_length=1024 configure hf; the reference rules have neither)
    p = _smoke_pipeline(tmp_path, "+eval.also.ref=['backend=reference','sweep_dir=null']")
    r = p.eval_runs["eval ref"]
    assert r.cfg.backend.name == "reference" and p.eval_run.cfg.backend.batch_size == 24


LEX = "+eval.also.lex=['backend=probe','backend.features=lexical','sweep_dir=null'"


@pytest.mark.parametrize("extra, message", [
    # an also-entry writing where the main evaluation writes, or inside it
    (LEX + ",'output_dir=evals/smoke']", "write overlapping directories"),
    (LEX + ",'output_dir=evals/smoke/monitors/x']", "write overlapping directories"),  # inside what eval writes
    (LEX + ",'output_dir=evals/smoke/combined']", "write overlapping directories"),   # the combined report's
    (LEX + ",'output_dir=evals']", "write overlapping directories"),                  # around the main one
    # named like the main evaluation's prompt: the combined matrix keys evaluations by name
    ("+eval.also.direct_v1=['backend=probe','backend.features=lexical','sweep_dir=null']", "named like the main"),
])
def test_evaluations_that_would_overwrite_each_other_stop_before_any_compute(tmp_path, extra, message):
    from automon.pipeline import PipelineError

    with pytest.raises(PipelineError, match=message):
        _smoke_pipeline(tmp_path, extra)


@pytest.mark.parametrize("extra, message", [
    (("+eval.also.pipeline=['backend=probe','sweep_dir=null']",), "is a name the pipeline uses itself"),
    ((LEX + ",'data.dir={other}']",), "the combined matrix compares monitors on one test set"),  # failed in combine
    (("python={tmp}/nonexistent",), "is not an executable interpreter"),  # a traceback when the first stage ran
    (("state_dir={tmp}/afile",), "is a file, not a directory"),
    (("state_dir=evals/smoke/lex", LEX + "]"), "write overlapping directories"),
])
def test_late_pipeline_failures_are_refused_at_start_up(tmp_path, extra, message):
    """What failed after compute was spent (or was not checked at all) stops the pipeline at start-up."""
    from automon.pipeline import PipelineError

    support.make_build(tmp_path / "other", pairs_per_subset=1, train_per_subset=2, seed=3)
    (tmp_path / "afile").write_text("x")
    extra = [e.format(tmp=tmp_path, other=tmp_path / "other") for e in extra]
    with pytest.raises(PipelineError, match=message):
        _smoke_pipeline(tmp_path, *extra, validated=True)


def test_a_pipeline_error_is_one_line(tmp_path):
    """A typo in an also-entry (dry_run) was Hydra's multi-line message advising '+key'; a stage that failed
    was five lines. Now each is one `error:` line, exit status 2."""
    r, _ = pipeline(tmp_path, "experiment=smoke", "dry_run=true",
                    "+eval.also.lex=['backend=probe','backend.featurez=lexical','sweep_dir=null']", timeout=120)
    line = support.one_error_line(r, "Key 'featurez' not in 'ProbeConfig'", "valid keys here: name")
    assert "To append" not in r.stderr and "+backend" not in line


def test_a_killed_stage_ends_in_one_error_line(tmp_path):
    """A stage killed by a signal (or failing) ends the pipeline in one `error:` line naming the stage,
    the signal and its log; the log's last lines come before it as context when the output was not echoed."""
    import stat

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'the stage says hello'\nkill -9 $$\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    r = subprocess.run([sys.executable, str(PIPELINE), "experiment=smoke", f"python={fake}", "echo=false"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, WANDB_MODE="disabled", HF_HUB_OFFLINE="1"))
    line = support.one_error_line(r, "build failed (killed by SIGKILL)", "build.log")
    assert "the stage says hello" in r.stdout, r.stdout[-2000:]
    assert line.startswith("error: ")


def test_publishing_never_replaces_what_it_did_not_write(tmp_path):
    """eval.publish replaced whatever directory it named (a user's notes, docs/results, the evaluation's own
    output). Now it refuses, at start-up, a file, a non-empty directory without its marker, and any place that
    overlaps an evaluation's output; a directory an earlier publish wrote (the marker) is replaced."""
    from automon.outdir import write_published_marker
    from automon.pipeline import PipelineError

    notes = tmp_path / "results"
    notes.mkdir()
    (notes / "notes.md").write_text("mine")
    with pytest.raises(PipelineError, match="did not write"):
        _smoke_pipeline(tmp_path, LEX + "]", f"eval.publish={notes}")
    assert (notes / "notes.md").read_text() == "mine"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(PipelineError, match="is a file"):
        _smoke_pipeline(tmp_path, LEX + "]", f"eval.publish={tmp_path / 'afile'}")
    with pytest.raises(PipelineError, match="overlaps"):
        _smoke_pipeline(tmp_path, LEX + "]", f"eval.publish={tmp_path / 'evals' / 'smoke'}")
    write_published_marker(notes)
    _smoke_pipeline(tmp_path, LEX + "]", f"eval.publish={notes}")  # an earlier publish's: accepted
    _smoke_pipeline(tmp_path, LEX + "]", f"eval.publish={tmp_path / 'new'}")


def test_publish_itself_refuses_a_directory_it_did_not_write(tmp_path):
    """The same check inside report.combined.publish, before it replaces anything, and the marker it leaves."""
    from automon.outdir import PUBLISHED_MARKER, PublishError
    from automon.report.combined import publish

    combined, ev = tmp_path / "combined", tmp_path / "ev"
    for d in (combined, ev):
        d.mkdir()
        (d / "report.md").write_text("r")
    user = tmp_path / "user"
    user.mkdir()
    (user / "keep.txt").write_text("k")
    with pytest.raises(PublishError, match="did not write"):
        publish({"x": ev}, combined, user)
    assert (user / "keep.txt").exists()
    with pytest.raises(PublishError, match="overlaps"):
        publish({"x": ev}, combined, ev)
    dest = publish({"x": ev}, combined, tmp_path / "pub")
    assert (dest / PUBLISHED_MARKER).is_file() and (dest / "x" / "report.md").read_text() == "r"
    assert publish({"x": ev}, combined, dest) == dest  # its own: replaced
    (dest / "x" / "my-notes.md").write_text("added after publishing")  # not publish's: stays
    (ev / "report.md").write_text("r2")
    publish({"x": ev}, combined, dest)
    assert (dest / "x" / "my-notes.md").read_text() == "added after publishing"
    assert (dest / "x" / "report.md").read_text() == "r2"
    (ev / "timing.json").write_text("{}")  # a new file where the user has one: refused, nothing changed
    (dest / "x" / "timing.json").write_text("the user's")
    with pytest.raises(PublishError, match="no earlier publish wrote where this one writes: x/timing.json"):
        publish({"x": ev}, combined, dest)
    assert (dest / "x" / "timing.json").read_text() == "the user's" and (dest / "x" / "report.md").read_text() == "r2"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp dir left behind
    (dest / "x" / "timing.json").unlink()
    (ev / "timing.json").unlink()
    (ev / "report.md").unlink()  # gone from the evaluation: gone from the next publish too
    (ev / "metrics.json").write_text("{}")
    publish({"x": ev}, combined, dest)
    assert not (dest / "x" / "report.md").exists() and (dest / "x" / "metrics.json").exists()


def test_the_probes_of_a_probe_evaluation_are_a_stage_of_their_own(tmp_path):
    """An evaluation with backend=probe gets one train/probe.py run per backend.train_subsets entry, with
    the identity settings of its backend (so the evaluation loads what the stage trained); other
    evaluations get none, and stages without probe compose none."""
    p = _smoke_pipeline(tmp_path, "+eval.also.lex=['backend=probe','backend.features=lexical','sweep_dir=null',"
                                  "'backend.train_subsets=[sg_code,all]','backend.cap=50','backend.seed=3']")
    assert list(p.probe_runs) == ["probe lexical-sg_code", "probe lexical-all"]
    r = p.probe_runs["probe lexical-all"]
    assert r.stage == "probe" and r.command(sys.executable, REPO)[1] == str(REPO / "train" / "probe.py")
    assert (r.cfg.train_subset, r.cfg.features, r.cfg.cap, r.cfg.seed) == ("all", "lexical", 50, 3)
    assert r.cfg.data.dir == p.eval_runs["eval lex"].cfg.backend.data_dir == "data/builds/smoke"
    assert r.cfg.model.name == "tiny" and r.cfg.cache_dir is None
    assert _smoke_pipeline(tmp_path).probe_runs == {}
    assert _smoke_pipeline(tmp_path, "stages=[build,train,eval]", "+eval.also.lex=['backend=probe',"
                                     "'sweep_dir=null']").probe_runs == {}


def test_a_stage_typo_is_the_stage_own_error(tmp_path):
    from automon.pipeline import PipelineError

    with pytest.raises(PipelineError, match=r"(?s)train/sft\.py rejects its configuration:.*"
                                            r"unknown config key 'train\.lrr'; valid keys under train: lora, lr"):
        _smoke_pipeline(tmp_path, 'train.extra_args=["train.lrr=1"]')
    with pytest.raises(PipelineError, match=r"(?s)eval/holdout\.py rejects.*threshold=4\.0 must lie in \[0, 1\]"):
        _smoke_pipeline(tmp_path, 'eval.extra_args=["threshold=4"]')
    with pytest.raises(PipelineError, match=r"(?s)data_build/build\.py rejects.*Key 'sg_codee' not in 'TestSizes'"):
        _smoke_pipeline(tmp_path, 'build.extra_args=["test.sg_codee=4"]')


def test_bad_settings_fail_with_a_message(tmp_path):
    r, _ = pipeline(tmp_path, "experiment=smoke", "stages=[build,tran]", timeout=60)
    assert r.returncode == 2 and "unknown stage" in r.stderr and "build, train, probe, eval" in r.stderr
    r, _ = pipeline(tmp_path, "experiment=smoke", f"sources.root={tmp_path / 'nope'}", timeout=60)
    assert r.returncode == 2 and "is not a directory" in r.stderr
    # a typo in one stage's settings stops the pipeline before any stage runs
    r, _ = pipeline(tmp_path, "experiment=smoke", 'train.extra_args=["train.lrr=1"]', timeout=120)
    assert r.returncode == 2 and "unknown config key 'train.lrr'" in r.stderr, _explain(r)
    assert "build: running" not in r.stdout and not (tmp_path / "data" / "builds").exists()


def test_stages_run_in_their_own_session_and_ctrl_c_is_passed_on_once(tmp_path):
    """Ctrl-C at the terminal reaches only the pipeline, which passes SIGINT to the running stage once:
    training then checkpoints (a second SIGINT would stop it at once) and the stages end in one line."""
    import signal

    import automon.pipeline.proc as proc

    out = tmp_path / "sid.log"
    rc = proc.run_logged([sys.executable, "-c", "import os; print('own session', os.getsid(0) == os.getpid())"],
                         dict(os.environ), out, False, "")
    assert rc == 0 and "own session True" in out.read_text()
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        proc.install_signal_forwarding()
        assert signal.getsignal(signal.SIGINT) is proc._forward
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def test_after_ctrl_c_no_stage_says_running_and_the_interrupted_ones_say_so(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the smoke experiment trained two runs at once (train.parallel=2): the third, queued,
    then printed 'train sg_code: running' just before 'stopped by signal SIGINT'; the running ones' last
    line was their 'running'."""
    import signal

    import automon.pipeline.proc as proc
    from automon.stage_status import Currency, Status

    p = _smoke_pipeline(tmp_path)
    assert p.c.train.parallel == 2 and len(p.train_runs) == 3
    monkeypatch.setattr(proc, "_stopped", [])
    started = []

    def ctrl_c_while_it_runs(argv, env, log, echo, prefix):
        started.append(argv)
        proc._forward(signal.SIGINT, None)  # what the pipeline's handler does on Ctrl-C: passed on once
        return 130  # the stage stops (training after its checkpoint)

    monkeypatch.setattr(proc, "run_logged", ctrl_c_while_it_runs)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(proc.Stopped, match="stopped by signal SIGINT"):
        p._train_local([(r, Status(Currency.MISSING, "no run yet")) for r in p.train_runs.values()])
    lines = [ln.removeprefix("[pipeline] ") for ln in capsys.readouterr().out.splitlines()]
    said = {name: [ln for ln in lines if ln.startswith(f"{name}: ")] for name in (r.name for r in p.train_runs.values())}
    ran = [name for name, own in said.items() if own]
    assert 1 <= len(ran) == len(started) <= 2, lines  # a stage says 'running' only when it runs: never the queued one
    for name in ran:
        assert said[name][0].startswith(f"{name}: running (")
        assert said[name][-1] == f"{name}: interrupted (exit status 130); SIGINT stops the pipeline", lines


def test_config_diff_and_run_names():
    from automon.pipeline.stages import entry_dirname
    from automon.stage_status import config_diff

    assert config_diff({"a": {"b": 1, "c": 2.0}}, {"a": {"b": 1, "c": 2}}) == []
    assert config_diff({"a": {"b": 1}}, {"a": {"b": 2, "d": 3}}) == ["a.b: 1 -> 2", "a.d: '<absent>' -> 3"]
    assert config_diff({"a": {"b": 1}, "w": {"x": 1}}, {"a": {"b": 1}, "w": {"x": 2, "y": 0}}, ["w"]) == []
    assert entry_dirname("safety_qa") == "safety_qa" and entry_dirname("[safety_qa, sg_code]") == "safety_qa+sg_code"


# ---------------------------------------------------------------- the smoke pipeline

@pytest.mark.slow
def test_smoke_pipeline_report_has_a_real_matrix(smoke):
    work, r, _ = smoke  # how long it takes (the 5 minutes on 2 cores): bench/bench_smoke.py
    out = work / "evals" / "smoke"
    for name in EVAL_FILES:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    # every trained subset has an adapter, recorded with the build it was trained on
    manifest_sha = sha256_file(work / "data" / "builds" / "smoke" / "manifest.json")
    for s in SMOKE_TRAINED:
        run = work / "runs" / "smoke" / s
        assert (run / "adapter" / "adapter_config.json").is_file()
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "complete" and info["data_manifest_hash"] == manifest_sha
    # the matrix: base + every trained subset (>= 2) over all six test subsets, MR, FAR and CIs
    rows = list(csv.DictReader((out / "matrix.csv").open()))
    monitors = {row["row"] for row in rows}
    assert monitors == {"base", *SMOKE_TRAINED} and len(monitors) >= 3
    for m in monitors:
        tested = {row["test"] for row in rows if row["row"] == m}
        assert set(SUBSETS) <= tested, (m, tested)
    for row in rows:
        if row["test"] in SUBSETS:
            lo, mr, hi = float(row["mr_lo"]), float(row["mr"]), float(row["mr_hi"])
            assert 0 <= lo <= mr <= hi <= 1
            lo, far, hi = float(row["far_lo"]), float(row["far"]), float(row["far_hi"])
            assert 0 <= lo <= far <= hi <= 1
            assert int(row["n"]) == 12  # 6 pairs per subset
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["manifest_hash"] == manifest_sha
    assert set(metrics["monitors"]) == {"base", *SMOKE_TRAINED}
    report = (out / "report.md").read_text()
    assert "Miss rate" in report and "False alarm rate" in report and "heatmap.png" in report
    # the pipeline prints the matrix and where everything is
    assert "Miss rate (MR" in r.stdout and "report: evals/smoke/report.md" in r.stdout
    # ... and says, in the report itself and before the matrix, that its numbers are no finding
    head = report.split("## Transfer matrix")[0]
    assert "random weights" in head and "synthetic" in head and "Small sample" in head
    assert r.stdout.count("CAVEAT:") == 3 and r.stdout.index("CAVEAT:") < r.stdout.index("Miss rate (MR")


@pytest.mark.slow
def test_second_run_does_no_work(smoke):
    work, _, _ = smoke
    before = _mtimes(work)
    r, secs = pipeline(work, "experiment=smoke")
    assert r.returncode == 0, _explain(r)
    print(f"\nsmoke pipeline, second run: {secs:.1f} s")
    for stage in ("build", *(f"train {s}" for s in SMOKE_TRAINED), "eval"):
        assert f"[pipeline] {stage}: current, skipped" in r.stdout, (stage, r.stdout[-3000:])
    assert "running" not in r.stdout and "$ " not in r.stdout  # no stage command was run
    after = _mtimes(work)
    changed = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
    assert not changed, f"a no-op run touched {changed[:5]}"


@pytest.mark.slow
def test_training_settings_keep_resume_or_retrain_as_train_sft_would(smoke, tmp_path):
    """The pipeline asks training whether a run is current: a key that is not part of a run's identity
    (train.logging_steps) keeps a finished adapter and resumes an unfinished run; an identity key
    (train.lr) retrains from scratch."""
    work = tmp_path / "work"
    shutil.copytree(smoke[0], work)  # the module's smoke run stays as it is for the other tests
    runs = work / "runs" / "smoke"
    logging7 = 'train.extra_args=["train.logging_steps=7"]'

    before = _mtimes(work)
    r, _ = pipeline(work, "experiment=smoke", "stages=[train,eval]", logging7)
    assert r.returncode == 0, _explain(r)
    for s in SMOKE_TRAINED:
        assert f"[pipeline] train {s}: current, skipped (complete, 40 steps" in r.stdout, r.stdout[-3000:]
    assert "[pipeline] eval: current, skipped" in r.stdout and "$ " not in r.stdout
    after = _mtimes(work)
    assert [k for k in before if before[k] != after.get(k)] == [], "nothing may be retrained or rewritten"

    # an unfinished run (stopped at step 20 of 40) resumes in place under the new logging setting
    run = runs / "safety_qa"
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(info, status="preempted")))
    shutil.rmtree(run / "adapter")
    shutil.rmtree(run / "checkpoints" / "checkpoint-40")
    ckpt = run / "checkpoints" / "checkpoint-20" / "adapter_model.safetensors"
    ckpt_mtime = ckpt.stat().st_mtime_ns
    r, _ = pipeline(work, "experiment=smoke", "stages=[train]", logging7)
    assert r.returncode == 0, _explain(r)
    assert ("[pipeline] train safety_qa: running (resumable: incomplete (status preempted): resumes from "
            "checkpoint-20)") in r.stdout, r.stdout[-3000:]
    assert "resuming from runs/smoke/safety_qa/checkpoints/checkpoint-20" in r.stdout
    assert "overwrite=true" not in r.stdout and ckpt.stat().st_mtime_ns == ckpt_mtime
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "complete" and info["steps"] == 40 and info["segments"] == 2
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    assert "logging_steps: 5" in (run / "config.yaml").read_text()  # the run's identity is unchanged

    # an identity key: the run is another run, trained again from scratch into the same directory
    run = runs / "sg_code"
    weights = (run / "adapter" / "adapter_model.safetensors").read_bytes()
    r, _ = pipeline(work, "experiment=smoke", "stages=[train]", "train.subsets=[sg_code]",
                    'train.extra_args=["train.lr=1e-3"]')
    assert r.returncode == 0, _explain(r)
    assert ("[pipeline] train sg_code: running (stale: holds a run with a different config: "
            "train.lr: 0.005 -> 0.001)") in r.stdout, r.stdout[-3000:]
    assert "train.lr=1e-3 overwrite=true" in r.stdout and "resuming from" not in r.stdout
    assert "lr: 0.001" in (run / "config.yaml").read_text()
    assert (run / "adapter" / "adapter_model.safetensors").read_bytes() != weights


@pytest.mark.slow
def test_changes_rerun_only_what_is_stale(smoke):
    work, _, _ = smoke
    # a changed evaluation setting: only the evaluation would run
    r, _ = pipeline(work, "experiment=smoke", "dry_run=true", 'eval.extra_args=["threshold=0.4"]')
    assert r.returncode == 0, _explain(r)
    assert "build: current" in r.stdout and "train safety_qa: current" in r.stdout
    assert "eval: would run (stale: evaluation inputs changed: config.threshold: 0.5 -> 0.4)" in r.stdout
    # a changed training setting: that run is retrained from scratch (overwrite), then the evaluation
    r, _ = pipeline(work, "experiment=smoke", "dry_run=true", 'train.extra_args=["train.max_steps=41"]')
    assert ("train safety_qa: would run (stale: holds a run with a different config: train.max_steps: 40 -> 41)"
            in r.stdout)
    assert "overwrite=true" in r.stdout
    assert "eval: would run (stale: the runs it scores are trained first: safety_qa, syco_qa, sg_code)" in r.stdout
    # a damaged build file is noticed by its hash (not by its presence) and rebuilt; the rebuild is
    # byte-identical, so training and evaluation stay current and are not redone
    test_jsonl = work / "data" / "builds" / "smoke" / "test.jsonl"
    with open(test_jsonl, "a") as f:
        f.write("\n")
    adapters = {s: (work / "runs" / "smoke" / s / "adapter" / "adapter_model.safetensors").stat().st_mtime_ns
                for s in SMOKE_TRAINED}
    r, secs = pipeline(work, "experiment=smoke")
    assert r.returncode == 0, _explain(r)
    assert "build: running (" in r.stdout and "does not match its sha256 in manifest.json" in r.stdout
    assert "train sg_code: current, skipped" in r.stdout and "eval: current, skipped" in r.stdout
    assert adapters == {s: (work / "runs" / "smoke" / s / "adapter" / "adapter_model.safetensors").stat().st_mtime_ns
                        for s in SMOKE_TRAINED}
    r, _ = pipeline(work, "experiment=smoke", "dry_run=true")
    assert "build: current" in r.stdout
    # an adapter that changed after the evaluation makes the evaluation stale (its model card does not)
    adapter = work / "runs" / "smoke" / "sg_code" / "adapter"
    (adapter / "README.md").write_text((adapter / "README.md").read_text() + "\nedited\n")
    r, _ = pipeline(work, "experiment=smoke", "dry_run=true")
    assert "eval: current, skipped" in r.stdout, _explain(r)
    # nor does its config written again in another order (PEFT writes target_modules from a set)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["target_modules"] = config["target_modules"][::-1]
    (adapter / "adapter_config.json").write_text(json.dumps(config, indent=4))
    r, _ = pipeline(work, "experiment=smoke", "dry_run=true")
    assert "eval: current, skipped" in r.stdout, _explain(r)
    config["lora_alpha"] = 2 * config["lora_alpha"]  # what the adapter computes
    (adapter / "adapter_config.json").write_text(json.dumps(config, indent=4))
    r, _ = pipeline(work, "experiment=smoke", "dry_run=true")
    assert "eval: would run (stale: evaluation inputs changed: monitors.sg_code.adapter_hash: " in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_run_whose_adapter_is_damaged_is_not_current(smoke, tmp_path, damage):
    """Formerly the pipeline took a training run for current from its record (run.json) alone; the
    stage's answer now reads the adapter files evaluation relies on, and the rerun writes them again."""
    work = tmp_path / "work"
    shutil.copytree(smoke[0], work)
    weights = work / "runs" / "smoke" / "sg_code" / "adapter" / "adapter_model.safetensors"
    if damage == "missing":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[:1000])
    r, _ = pipeline(work, "experiment=smoke", "dry_run=true")
    assert r.returncode == 0, _explain(r)
    assert ("[pipeline] train sg_code: would run (resumable: complete by run.json, but its adapter is missing or "
            "damaged") in r.stdout, r.stdout[-3000:]
    assert "train safety_qa: current, skipped" in r.stdout and "eval: would run" in r.stdout
    if damage == "truncated":
        r, _ = pipeline(work, "experiment=smoke", "stages=[train]")
        assert r.returncode == 0, _explain(r)
        assert "overwrite=true" not in r.stdout  # resumed from its last checkpoint, not retrained
        from automon.adapter_meta import check_adapter_files

        check_adapter_files(weights.parent)
        r, _ = pipeline(work, "experiment=smoke", "stages=[train]", "dry_run=true")
        assert "train sg_code: current, skipped" in r.stdout, _explain(r)


@pytest.mark.slow
def test_probes_are_trained_by_their_stage_and_the_evaluation_loads_them(smoke):
    """The probe stage trains what the probe evaluation scores: the evaluation fits nothing itself, and a
    second run finds every probe current."""
    work, _, _ = smoke
    # a cache of its own: a probe of the same identity from an earlier test run would be current
    lex = ("+eval.also.lex=['backend=probe','backend.features=lexical','sweep_dir=null',"
           f"'backend.train_subsets=[sg_code,all]','backend.cap=40','backend.cache_dir={work / 'probes'}']")
    r, _ = pipeline(work, "experiment=smoke", lex)
    assert r.returncode == 0, _explain(r)
    assert "probe lexical-sg_code: running (" in r.stdout and "probe lexical-all: running (" in r.stdout
    log = (work / "evals" / "smoke" / "pipeline" / "logs" / "eval_lex.log").read_text()
    assert "eval lex: running" in r.stdout and "fitted the lexical probe" not in log, log[-3000:]
    assert len([d for d in (work / "probes" / "probes").iterdir() if d.is_dir()]) == 2
    assert (work / "evals" / "smoke" / "lex" / "report.md").is_file()
    r, _ = pipeline(work, "experiment=smoke", lex, "dry_run=true")
    assert r.returncode == 0, _explain(r)
    assert "probe lexical-all: current, skipped (trained probe at " in r.stdout
    assert "eval lex: current, skipped" in r.stdout
    # without the stage (another evaluation with a cache of its own, stages=[eval]) the evaluation fits
    # them itself, and says so; the main evaluation, its inputs unchanged, stays current
    lex2 = lex.replace("eval.also.lex=", "eval.also.lex2=").replace(str(work / "probes"), str(work / "probes2"))
    r, _ = pipeline(work, "experiment=smoke", lex2, "stages=[eval]")
    assert r.returncode == 0, _explain(r)
    assert "eval: current, skipped" in r.stdout and "eval lex2: running" in r.stdout, r.stdout[-3000:]
    log = (work / "evals" / "smoke" / "pipeline" / "logs" / "eval_lex2.log").read_text()
    assert "fitted the lexical probe" in log, log[-3000:]
