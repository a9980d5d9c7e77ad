"""bench/bench_eval.py runs end to end on a small synthetic build and splits model from harness time;
bench/bench_eval_gpu.py skips cleanly without CUDA (both crashed once when the config they build changed)."""

from __future__ import annotations

import json
import subprocess

import pytest
from support import REPO, has_cuda, run_script


def _bench(name: str, *args: str) -> subprocess.CompletedProcess:
    return run_script(REPO / "bench" / name, *args, timeout=300)


def test_the_cpu_eval_bench_runs_and_accounts_for_its_time(tmp_path):
    out = tmp_path / "medians.json"
    r = _bench("bench_eval.py", "--scale", "0.01", "--repeats", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    med = json.loads(out.read_text())["medians"]
    assert med["samples"] == 24 and med["prompt_tokens"] > 0          # 1% of 1,505 pairs, 6 subsets
    assert med["model_s"] > 0 and med["harness_s"] > 0
    parts = ("data_s", "render_s", "tokenize_s", "batching_s", "metrics_s", "report_s")
    assert sum(med[p] for p in parts) <= med["harness_s"] + 1e-6      # the parts it names lie inside


@pytest.mark.skipif(has_cuda(), reason="checks the no-CUDA path")
def test_the_gpu_eval_bench_skips_without_cuda(tmp_path):
    out = tmp_path / "x.json"
    r = _bench("bench_eval_gpu.py", "--out", str(out))
    assert r.returncode == 0 and r.stdout.startswith("SKIP:") and "no result file was written" in r.stdout
    assert not out.exists()
