"""bench/bench_train_gpu.py: skips cleanly without CUDA; its FLOP model matches published per-token figures; plumbing runs."""

from __future__ import annotations

import json
import os
import sys

import pytest
from support import REPO, has_cuda, run_script, warm_launcher

BENCH = REPO / "bench" / "bench_train_gpu.py"
sys.path.insert(0, str(REPO / "bench"))


def test_flops_per_token_match_the_reference_figures():
    """Reference figures (6N plus attention FLOPs per token): Qwen3-4B 14.99 / 16.35 / 21.78 GFLOP per token at 512 / 2k / 8k, 43.5 at 32k."""
    from bench_train_gpu import model_flops_per_token

    n4b = 3_633_511_936  # non-embedding parameters of Qwen3-4B's config (counted on the meta device)
    got = [round(model_flops_per_token(n4b, 36, 32 * 128, s) / 1e9, 2) for s in (512, 2048, 8192, 32768)]
    assert got == [14.99, 16.35, 21.78, 43.53]


@pytest.mark.skipif(has_cuda(), reason="checks the no-CUDA path")
def test_skips_with_a_clear_message_without_cuda(tmp_path):
    r = run_script(BENCH, "--out", str(tmp_path / "x.json"), timeout=120)
    assert r.returncode == 0 and "skipped: no CUDA device" in r.stderr
    assert not (tmp_path / "x.json").exists()


def test_tiny_plumbing_on_cpu(tmp_path, tiny_model_path):
    out = tmp_path / "bench.json"
    r = run_script(BENCH, "--tiny", "--allow-cpu", "--trainers", "peft", "--lengths", "64", "--warmup", "1",
                   "--steps", "2", "--out", str(out), "--model-dir", str(tiny_model_path),
                   "--python", warm_launcher(dict(os.environ)), timeout=300)  # its cell warm too
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    (rec,) = rep["results"]
    assert rec["status"] == "ok" and rec["trainer"] == "peft" and rec["seq_len"] == 64 and rec["timed_steps"] == 2
    assert rec["tokens_per_s"] > 0 and rec["n_non_embedding"] > 0
    assert rec["mfu"] is None and rec["peak_mem_allocated_gib"] is None   # not measured without a GPU
    assert rep["versions"]["trl"] and rep["flops_formula"].startswith("4N")
