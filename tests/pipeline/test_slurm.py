"""Sweeps on a real Slurm cluster (no mocks): the submitit launcher route, the plain sbatch route with
a dependent evaluation job, and a requeued training job that resumes from its checkpoint.

The `slurm` tests need a reachable cluster with accounting (sacct; submitit reads job states from
it) and a partition to run on: `bash scripts/slurm-local-up.sh` starts a single-node one on loopback
(root, Debian; .ci/run does it). Without one they skip, saying why; with AUTOMON_REQUIRE_SLURM=1
(set by .ci/run) they fail instead. AUTOMON_SLURM_PARTITION picks the partition (default: debug).
Jobs run the tiny model on CPU; the templates' GPU, memory and CPU requests are overridden on the
sbatch command line, exactly as a user adapts them (slurm/README.md).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PARTITION = os.environ.get("AUTOMON_SLURM_PARTITION", "debug")
REQUIRE = os.environ.get("AUTOMON_REQUIRE_SLURM") == "1"
SUBSETS = ("safety_qa", "safety_code", "syco_qa", "syco_reasoning", "sg_qa", "sg_code")
# the templates ask for a GPU node; on the test cluster: its partition, no GPU, 1 CPU, little memory
LOCAL_SBATCH = f"--partition={PARTITION} --gres=none --cpus-per-task=1 --mem=1G --time=20"
# Packed (the default) in packs of about two smoke examples: the default budget (max_seq_length, 32k)
# would put the whole smoke split in one pack, a step of ~15k tokens (~18 s on CPU with a 151k vocabulary).
PACK = "train.tokens_per_step=512"
TINY_TRAIN = f"train.max_steps=8 {PACK} train.grad_accum=1 train.lr=5e-3 wandb.mode=disabled"
TINY_EVAL = "backend=hf wandb.mode=disabled bootstrap.n=100 data.max_pairs_per_subset=3"


# ---------------------------------------------------------------- cluster detection

def _run(cmd: list[str], timeout: float = 15, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def cluster_problem() -> str | None:
    """None when a usable cluster answers, else why not (the skip reason)."""
    hint = "start one with `bash scripts/slurm-local-up.sh` (root, Debian)"
    missing = [t for t in ("sinfo", "sbatch", "squeue", "scontrol", "scancel", "sacct") if not shutil.which(t)]
    if missing:
        return f"no Slurm client tools ({', '.join(missing)} not on PATH): {hint}"
    try:
        r = _run(["sinfo", "-h", "-p", PARTITION, "-o", "%a %T"])
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within 15 s: {hint}"
    if r.returncode != 0:
        return f"no Slurm controller reachable (sinfo: {r.stderr.strip()[:200]}): {hint}"
    states = r.stdout.split()
    if not states or states[0] != "up" or not any(s.startswith(("idle", "mix", "alloc", "complet")) for s in states[1:]):
        return f"partition {PARTITION!r} has no usable node (sinfo: {r.stdout.strip() or 'nothing'}); " \
               "set AUTOMON_SLURM_PARTITION or " + hint
    r = _run(["sacct", "-n", "-X", "-S", "now-1minutes", "-o", "JobID"])
    if r.returncode != 0:
        return f"Slurm accounting is off (sacct: {r.stderr.strip()[:200]}); submitit needs it: {hint}"
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
        import submitit  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed: pip install -e '.[dev]'"
    return None


@pytest.fixture(scope="module")
def cluster():
    problem = cluster_problem()
    if problem:
        if REQUIRE:
            pytest.fail(f"AUTOMON_REQUIRE_SLURM=1 but {problem}")
        pytest.skip(problem)


@pytest.fixture
def jobs():
    """Job ids a test submits; whatever is still queued when it ends is cancelled."""
    ids: list[str] = []
    yield ids
    left = [i for i in ids if _run(["squeue", "-h", "-j", i.split("_")[0], "-o", "%i"]).stdout.strip()]
    if left:
        _run(["scancel", *left])


def venv_env(**extra: str) -> dict[str, str]:
    """Environment for jobs: this interpreter's venv (or the PATH as is), offline, no wandb."""
    venv = Path(sys.prefix)
    env = dict(os.environ, AUTOMON_DIR=str(REPO), HF_HUB_OFFLINE="1", WANDB_MODE="disabled",
               VENV=str(venv) if (venv / "bin" / "activate").exists() else "none")
    env.update(extra)
    return env


def wait_gone(ids: list[str], timeout: float, logs: list[Path] = ()) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not _run(["squeue", "-h", "-j", ",".join(i.split("_")[0] for i in ids), "-o", "%i"]).stdout.strip():
            return
        time.sleep(1)
    _run(["scancel", *ids])
    text = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    pytest.fail(f"jobs {ids} still queued after {timeout:.0f} s\n{_run(['squeue']).stdout}\n{text}")


def sacct(ids: list[str], want_final: bool = True, timeout: float = 30) -> dict[str, dict[str, str]]:
    """JobID -> {State, Start, End, ExitCode}; waits until accounting has the final states."""
    t0 = time.monotonic()
    while True:
        r = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobID,State,Start,End,ExitCode"])
        rows = {}
        for line in r.stdout.splitlines():
            jid, state, start, end, code = line.split("|")
            rows[jid] = {"State": state, "Start": start, "End": end, "ExitCode": code}
        final = rows and all(v["State"] not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING")
                             and v["End"] not in ("", "Unknown") for v in rows.values())
        if final or not want_final or time.monotonic() - t0 > timeout:
            return rows
        time.sleep(1)


@pytest.fixture(scope="module")
def build(tmp_path_factory, cluster):
    """A smoke-sized build (the pipeline's build stage only): (work dir, build dir)."""
    work = tmp_path_factory.mktemp("slurm")
    r = _run([sys.executable, str(REPO / "pipeline.py"), "experiment=smoke", "stages=[build]"], timeout=300,
             cwd=work, env=venv_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return work, work / "data" / "builds" / "smoke"


def check_matrix(out: Path, trained: list[str]) -> None:
    for name in ("report.md", "matrix.csv", "matrix.md", "heatmap.png", "pareto.png", "metrics.json"):
        assert (out / name).is_file(), name
    rows = list(csv.DictReader((out / "matrix.csv").open()))
    assert {r["row"] for r in rows} == {"base", *trained}
    for m in ("base", *trained):
        assert set(SUBSETS) <= {r["test"] for r in rows if r["row"] == m}
    for r in rows:
        assert float(r["mr_lo"]) <= float(r["mr"]) <= float(r["mr_hi"])
        assert float(r["far_lo"]) <= float(r["far"]) <= float(r["far_hi"])
    assert "Miss rate" in (out / "report.md").read_text()


def check_adapter(run: Path) -> dict:
    assert (run / "adapter" / "adapter_config.json").is_file() and (run / "adapter" / "automon_adapter.json").is_file()
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "complete", info
    return info


def wait_for_steps(metrics: Path, n: int, timeout: float, log: Path | None = None) -> None:
    """Until the run has logged n steps (training is under way, past the model's start-up)."""
    t0 = time.monotonic()
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= n):
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"training did not start in {timeout:.0f} s:\n" + (log.read_text()[-3000:] if log and log.exists() else ""))
        time.sleep(0.2)


def requeue_and_release(job: str) -> None:
    """`scontrol requeue` a running job, then let it start again at once. Slurm holds a requeued job
    ~2 min (BeginTime) unless released, and releasing it within the same second as the requeue fails
    ("Job credential revoked"): wait until it is pending again, then release it."""
    r = _run(["scontrol", "requeue", job])
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    while True:
        state = _run(["squeue", "-h", "-j", job, "-o", "%T %r"]).stdout.strip()
        if state.startswith("PENDING"):
            break
        assert time.monotonic() - t0 < 60, f"job {job} did not go back to the queue: {state!r}"
        time.sleep(0.3)
    time.sleep(2)
    for _ in range(10):
        _run(["scontrol", "update", f"JobId={job}", "StartTime=now"])
        time.sleep(2)
        if not _run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip().startswith("PENDING"):
            break


def check_resumed(run: Path, steps: int) -> int:
    """The run finished after two segments, resuming from a checkpoint in the middle; returns its step."""
    info = check_adapter(run)
    assert info["segments"] == 2 and info["steps"] == steps, info
    log = (run / "train.log").read_text()
    assert "received SIGTERM: saving a checkpoint" in log, log[-3000:]
    resumed = re.findall(r"resuming from \S*checkpoint-(\d+)", log)
    assert resumed and 0 < int(resumed[0]) < steps, log[-3000:]
    logged = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, steps + 1)), "metrics.jsonl must hold every step once after the resume"
    return int(resumed[0])


# ---------------------------------------------------------------- no cluster needed

@pytest.mark.parametrize("script,config", [("train/sft.py", "sft"), ("eval/holdout.py", "holdout")])
@pytest.mark.parametrize("preset", ["slurm_h100", "slurm_local"])
def test_launcher_presets_make_the_job_scripts_submitit_submits(preset, script, config, tmp_path, monkeypatch):
    """What the launcher does with a preset, without a cluster: the same executor calls as
    hydra_submitit_launcher's SlurmLauncher.launch (submitit refuses unknown parameters), then the
    sbatch text submitit would submit. A fake `srun` on PATH satisfies submitit's cluster probe."""
    submitit = pytest.importorskip("submitit")
    from hydra import compose, initialize_config_dir
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    from automon.config import eval as eval_config
    from automon.config import train as train_config

    (eval_config if config == "holdout" else train_config).register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name=config, overrides=[f"hydra/launcher={preset}"], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert params.pop("_target_").endswith("SlurmLauncher")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    params.pop("submitit_folder")
    ex = submitit.AutoExecutor(cluster="slurm", folder=tmp_path / "jobs", slurm_max_num_timeout=params.pop("max_num_timeout"))
    params["name"] = "automon"  # ${hydra.job.name} resolves only inside a running job
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    text = ex._executor._make_submission_file_text(f"python {script}", "0")
    lines = set(text.splitlines())
    if preset == "slurm_h100":  # one H100 job per run, on the GPU partition, warned before its time limit
        assert {"#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=1"} <= lines, text
        assert re.search(r"^#SBATCH --signal=USR2@\d+$", text, re.M), text
    else:  # the loopback cluster has no GPUs: a GPU request would never be scheduled
        assert "#SBATCH --partition=debug" in lines and "gpus" not in text, text
    assert "export TOKENIZERS_PARALLELISM=false" in lines, text


def test_templates_parse_and_say_what_to_fix(tmp_path):
    scripts = [*sorted((REPO / "slurm").glob("*.sbatch")), REPO / "slurm" / "common.sh",
               REPO / "scripts" / "slurm-local-up.sh", REPO / "scripts" / "slurm-local-down.sh"]
    assert len(scripts) >= 7
    for s in scripts:
        r = _run(["bash", "-n", str(s)])
        assert r.returncode == 0, (s, r.stderr)
    # outside an array and without SUBSET the training template stops with a fix-it message
    env = {k: v for k, v in venv_env(VENV="none").items() if not k.startswith("SLURM_") and k != "SUBSET"}
    r = _run(["bash", str(REPO / "slurm" / "train.sbatch")], cwd=tmp_path, env=env)
    assert r.returncode == 2 and "SUBSET is unset" in r.stderr, r.stderr
    r = _run(["bash", str(REPO / "slurm" / "train.sbatch")], cwd=tmp_path, env={**env, "AUTOMON_DIR": str(tmp_path)})
    assert r.returncode == 2 and "not an automon checkout" in r.stderr, r.stderr


# ---------------------------------------------------------------- on the cluster

@pytest.mark.slurm
@pytest.mark.slow
def test_sweep_through_submitit_launcher(build, jobs):
    """pipeline.py with train.launcher=slurm_local: one Hydra multirun (`train/sft.py -m subset=...
    hydra/launcher=slurm_local`), one Slurm array task per subset, then the matrix."""
    work, _ = build
    trained = ["safety_qa", "syco_qa"]
    args = [sys.executable, str(REPO / "pipeline.py"), "experiment=smoke", "train.launcher=slurm_local",
            f"train.subsets=[{','.join(trained)}]", "train.runs_dir=runs/submitit", "eval.out=evals/submitit",
            'eval.extra_args=["data.max_pairs_per_subset=3","bootstrap.n=100"]']
    if PARTITION != "debug":
        args.append(f'train.launcher_args=["hydra.launcher.partition={PARTITION}"]')
    t0 = time.perf_counter()
    r = _run(args, timeout=900, cwd=work, env=venv_env())
    print(f"\nsubmitit route (2 training jobs + local eval): {time.perf_counter() - t0:.1f} s")
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    assert "train/sft.py -m subset=safety_qa,syco_qa hydra/launcher=slurm_local" in r.stdout
    runs = work / "runs" / "submitit"
    for s in trained:
        check_adapter(runs / s)
    # the training really ran as Slurm jobs: submitit's folders name them, sacct has them COMPLETED
    job_ids = sorted({p.name for p in (runs / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name)})
    assert len(job_ids) == len(trained), job_ids
    jobs.extend(job_ids)
    states = sacct(job_ids)
    assert {j: v["State"] for j, v in states.items()} == {j: "COMPLETED" for j in job_ids}, states
    check_matrix(work / "evals" / "submitit", trained)
    # nothing changed: a second run submits nothing
    r = _run(args, timeout=120, cwd=work, env=venv_env())
    assert r.returncode == 0 and "submitting" not in r.stdout and "eval: current, skipped" in r.stdout, r.stdout[-3000:]


@pytest.mark.slurm
@pytest.mark.slow
def test_sweep_through_sbatch_with_dependent_eval(build, jobs):
    """`sbatch slurm/sweep.sbatch`: training array -> evaluation job with --dependency=afterok; with
    PROBES=lexical also a probe array -> its own evaluation, which loads the probes the array trained; with
    STRESS="inject claim" every evaluation the sweep submits (the probes' too) scores the stressed sets."""
    work, build_dir = build
    runs, out = work / "runs" / "sbatch", work / "evals" / "sbatch"
    env = venv_env(BUILD=str(build_dir), RUNS=str(runs), EVAL_OUT=str(out), MODEL="tiny",
                   SUBSETS="safety_qa sg_code", TRAIN_ARGS=TINY_TRAIN, EVAL_ARGS=TINY_EVAL,
                   TRAIN_SBATCH_ARGS=LOCAL_SBATCH, EVAL_SBATCH_ARGS=LOCAL_SBATCH, BUILD_SBATCH_ARGS=LOCAL_SBATCH,
                   PROBES="lexical", PROBE_ARGS=f"cap=40 cache_dir={work / 'probes'}", PROBE_SBATCH_ARGS=LOCAL_SBATCH,
                   PROBE_EVAL_ARGS="wandb.mode=disabled bootstrap.n=100", STRESS="inject claim")
    t0 = time.perf_counter()
    r = _run(["sbatch", "--parsable", *LOCAL_SBATCH.split(), f"--output={work}/sweep-%j.out",
              str(REPO / "slurm" / "sweep.sbatch")], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    sweep = r.stdout.strip().split(";")[0]
    jobs.append(sweep)
    wait_gone([sweep], 120, [work / f"sweep-{sweep}.out"])
    ids = dict(line.split("=", 1) for line in (runs / ".slurm" / "sweep.env").read_text().split())
    assert ids["BUILD_JOB"] == "skipped"  # the build exists
    train_job, eval_job = ids["TRAIN_JOB"], ids["EVAL_JOB"]
    probe_job, probe_eval = ids["PROBE_JOB_lexical"], ids["PROBE_EVAL_JOB_lexical"]
    jobs += [train_job, eval_job, probe_job, probe_eval]
    logs = sorted((runs / ".slurm").glob("*.out"))
    wait_gone([train_job, eval_job, probe_job, probe_eval], 600, logs)
    print(f"\nsbatch route (sweep job, 2-task array, dependent eval): {time.perf_counter() - t0:.1f} s")
    states = sacct([train_job, eval_job])
    tasks = {j: v for j, v in states.items() if j.startswith(f"{train_job}_")}
    assert len(tasks) == 2 and all(v["State"] == "COMPLETED" for v in tasks.values()), states
    assert states[eval_job]["State"] == "COMPLETED", (states, [p.read_text()[-2000:] for p in logs])
    # afterok: the evaluation started only after every training task had ended
    assert states[eval_job]["Start"] >= max(v["End"] for v in tasks.values()), states
    for s in ("safety_qa", "sg_code"):
        check_adapter(runs / s)
    check_matrix(out, ["safety_qa", "sg_code"])
    states = sacct([probe_job, probe_eval])
    assert all(v["State"] == "COMPLETED" for v in states.values()) and len(states) == 3, states
    assert len([d for d in (work / "probes" / "probes").iterdir() if d.is_dir()]) == 2
    probe_log = (runs / ".slurm" / f"eval-probe-lexical-{probe_eval}.out").read_text()
    assert "fitted the lexical probe" not in probe_log and (work / "evals" / "sbatch_probe_lexical" / "report.md").is_file(), probe_log[-3000:]
    for evaluation in (out, work / "evals" / "sbatch_probe_lexical"):  # STRESS reached both evaluations
        rows = list(csv.DictReader(open(evaluation / "robustness.csv")))
        assert {r["stress"] for r in rows} == {"inject", "claim"}, evaluation


@pytest.mark.slurm
@pytest.mark.slow
def test_requeued_training_resumes_from_checkpoint(build, jobs):
    """`scontrol requeue` of a running training job: the job gets SIGTERM, the run saves a checkpoint
    and stops; the requeued job (slurm/train.sbatch, --requeue) resumes from that checkpoint."""
    work, build_dir = build
    runs = work / "runs" / "requeue"
    run = runs / "safety_qa"
    steps = 300
    env = venv_env(BUILD=str(build_dir), RUNS=str(runs), MODEL="tiny", SUBSET="safety_qa",
                   TRAIN_ARGS=f"train.max_steps={steps} {PACK} train.grad_accum=1 train.logging_steps=1 "
                              "train.save_steps=100000 wandb.mode=disabled")
    log = work / "requeue-%j.out"
    r = _run(["sbatch", "--parsable", *LOCAL_SBATCH.split(), f"--output={log}",
              str(REPO / "slurm" / "train.sbatch")], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    jobs.append(job)
    log = work / f"requeue-{job}.out"
    wait_for_steps(run / "metrics.jsonl", 3, 180, log)
    requeue_and_release(job)
    wait_gone([job], 300, [log])
    text = log.read_text()
    assert "restart 0" in text and "restart 1" in text and "got SIGTERM" in text, text[-3000:]
    step = check_resumed(run, steps)
    assert sacct([job])[job]["State"] == "COMPLETED"
    print(f"\nsbatch requeue: stopped and resumed at step {step} of {steps}")


@pytest.mark.slurm
@pytest.mark.slow
def test_requeued_submitit_job_resumes_and_the_launcher_waits(build, jobs):
    """The same through `train/sft.py -m ... hydra/launcher=slurm_local`: the requeued submitit job
    resumes from the checkpoint and the multirun still ends successfully."""
    work, build_dir = build
    runs = work / "runs" / "submitit-requeue"
    steps = 300
    cmd = [sys.executable, str(REPO / "train" / "sft.py"), "-m", "subset=safety_qa", "hydra/launcher=slurm_local",
           f"hydra.launcher.partition={PARTITION}", "model=tiny", f"data.dir={build_dir}",
           f"train.max_steps={steps}", PACK, "train.grad_accum=1", "train.logging_steps=1",
           "train.save_steps=100000", "wandb.mode=disabled", f"hydra.sweep.dir={runs}",
           "output_dir=${hydra:sweep.dir}/${hydra:runtime.choices.subset}"]
    p = subprocess.Popen(cmd, cwd=work, env=venv_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_steps(runs / "safety_qa" / "metrics.jsonl", 3, 180)
        # one job: submitit names its folder by the job id (an array task would be <id>_0)
        job = next(d.name for d in (runs / ".submitit").iterdir() if re.fullmatch(r"\d+(_0)?", d.name))
        requeue_and_release(job)
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
        if (runs / ".submitit").is_dir():  # whatever is still queued is cancelled by the fixture
            jobs += [d.name for d in (runs / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", d.name)]
    assert p.returncode == 0, out[-3000:]
    step = check_resumed(runs / "safety_qa", steps)
    print(f"\nsubmitit requeue: stopped and resumed at step {step} of {steps}")
