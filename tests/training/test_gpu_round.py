"""bench/gpu_round.py, the one prepared GPU round, without a GPU: its dry run lists every step with its budget and
command, the wheels and their size, parses every step's command and writes nothing; every test marked gpu is in
one of its steps; a real round records each step and goes on after a failure or a timeout, killing the step's
whole process group."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from support import REPO, run_script

sys.path.insert(0, str(REPO / "bench"))
import gpu_round  # noqa: E402

CARRY_MIB = 64


def _tree(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in path.rglob("*")} if path.exists() else {}


def test_the_dry_run_lists_every_step_the_wheels_and_writes_nothing(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    watched = {d: _tree(REPO / d) for d in ("bench/results", ".whl", "scripts")}
    r = run_script(REPO / "bench" / "gpu_round.py", "--dry-run", "--check", "--out", str(out), "--work", str(work),
                   timeout=600, env={**os.environ, "OUT": str(out)})
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    text = r.stdout
    default = [s for s in gpu_round.STEPS if s.default]
    for i, s in enumerate(default, 1):              # every step, in order, with its budget and its command
        assert re.search(rf"^  {i}\. {re.escape(s.name)} +{s.budget_s} s ", text, re.M), s.name
        assert f"check {s.name}: ok" in text, s.name
    budgets = sum(s.budget_s for s in default)
    assert f"budgets sum to {budgets} s" in text and budgets <= gpu_round.STEP_DEADLINE_S < 9 * 60
    assert "the round by 540 s (9 min)" in text
    m = re.search(r"^wheels: (\d+) files, ([\d.]+) MiB \(([\d,]+) bytes\) from (\.whl/|scripts/gpu-wheels\.txt)",
                  text, re.M)
    assert m and int(m.group(1)) > 10 and float(m.group(2)) <= CARRY_MIB, text[:2000]
    assert "liger_kernel-" in text and "trl-1.15.0" in text and "unsloth-" in text
    for s in gpu_round.STEPS:
        if not s.default:
            assert f"not in this round: {s.name} ({s.budget_s} s)" in text
    assert "dry run: ok" in text and "FAIL" not in text
    assert not out.exists() and not work.exists()  # nothing written: not $OUT, not the work dir
    assert {d: _tree(REPO / d) for d in watched} == watched


def test_the_round_fits_the_deadline_and_runs_every_gpu_test():
    """Budgets per step sum under the steps' deadline, inside 9 minutes with room to stop; every test file with a
    gpu mark is run by some step (the ones over this round's budget by a step of their own)."""
    default = [s for s in gpu_round.STEPS if s.default]
    assert [s.name for s in default[:2]] == ["install", "device"]
    assert sum(s.budget_s for s in default) <= gpu_round.STEP_DEADLINE_S <= gpu_round.ROUND_LIMIT_S - 10
    assert gpu_round.ROUND_LIMIT_S <= 9 * 60
    mark = re.compile(r"pytest\.mark\." + "gpu" + r"\b")   # (spelt apart: this file is not one of them)
    marked = {p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py") if mark.search(p.read_text())}
    run = {a for s in gpu_round.STEPS for a in s.argv if a.startswith("tests/")}
    assert marked and marked <= run, marked - run
    trainers = {s.argv[s.argv.index("--trainers") + 1] for s in default if "--trainers" in s.argv}
    assert trainers == {"unsloth", "peft"}


def test_a_selection_outside_the_deadline_fails_the_dry_run(tmp_path):
    r = run_script(REPO / "bench" / "gpu_round.py", "--dry-run", "--deadline-s", "100", "--out", str(tmp_path / "o"),
                   timeout=120)
    assert r.returncode == 1 and "FAIL: the budgets" in r.stdout, r.stdout[-2000:]
    r = run_script(REPO / "bench" / "gpu_round.py", "--dry-run", "--steps", "nope", timeout=120)
    assert r.returncode != 0 and "unknown step nope" in r.stderr + r.stdout


def test_a_round_records_every_step_and_goes_on_after_a_failure_and_a_timeout(tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    py = sys.executable
    steps = [
        gpu_round.Step("fails", 2, "exits 3", [py, "-c", "import sys; print('failing'); sys.exit(3)"]),
        gpu_round.Step("hangs", 3, "a child that outlives its budget",
                       [py, "-c", "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
                                  "'import time; time.sleep(120)']); open(sys.argv[1], 'w').write(str(p.pid)); "
                                  "time.sleep(120)", str(pidfile)]),
        next(s for s in gpu_round.STEPS if s.name == "device"),
    ]
    out, work = tmp_path / "out", tmp_path / "work"
    args = argparse.Namespace(out=str(out), work=str(work), deadline_s=26.0)
    t = time.monotonic()
    rc = gpu_round.run_round(steps, args)
    assert rc == 1 and time.monotonic() - t < 26 + 15
    import json

    rec = json.loads((out / "round.json").read_text())
    got = {s["name"]: s for s in rec["steps"]}
    assert [s["name"] for s in rec["steps"]] == ["fails", "hangs", "device"]
    assert got["fails"]["status"] == "failed" and got["fails"]["rc"] == 3
    assert got["hangs"]["status"] == "timeout" and got["hangs"]["timeout_s"] <= 26 - 15
    assert got["device"]["status"] == "ok" and rec["device"]["torch"] and "device.json" in got["device"]["wrote"]
    assert "failing" in (out / "01-fails.log").read_text()
    assert "stopped after" in (out / "02-hangs.log").read_text()
    pid = int(pidfile.read_text())
    for _ in range(50):   # the step's grandchild went with its process group
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {pid} of the timed-out step is still running")
