"""bench/bench_train_gpu.py: skips cleanly without CUDA; its FLOP model matches published per-token figures; plumbing runs."""

from __future__ import annotations

import json
import os
import sys

import pytest
from support import REPO, has_cuda, run_script, synthetic_corpus_record, warm_launcher

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


def test_the_corpus_sweep_takes_the_training_options_as_lists():
    """--corpus sweeps the config keys' values (parse only: --check-args imports no torch): the cells are the
    product in a fixed order, the peft trainer's attention and Liger values for peft cells only."""
    r = run_script(BENCH, "--corpus", "--layouts", "packed", "--trainers", "unsloth,peft",
                   "--tokens-per-step", "16k,32k,64k,128k", "--grad-ckpt", "off,on,auto",
                   "--attn", "flex_attention,sdpa", "--liger", "on,off", "--deadline-s", "300", "--check-args",
                   timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = [json.loads(x) for x in r.stdout.splitlines()]
    budgets = [16384, 32768, 65536, 131072]
    unsloth = [c for c in cells if c["trainer"] == "unsloth"]
    peft = [c for c in cells if c["trainer"] == "peft"]
    assert len(unsloth) == 4 * 3 and len(peft) == 4 * 2 * 2 * 3 and cells == unsloth + peft
    assert [c["tokens_per_step"] for c in unsloth[::3]] == budgets and {c["attn_implementation"] for c in unsloth} == {None}
    assert [(c["attn_implementation"], c["liger"], c["grad_ckpt"]) for c in peft[:4]] == \
        [("flex_attention", "on", "off"), ("flex_attention", "on", "on"), ("flex_attention", "on", "auto"),
         ("flex_attention", "off", "off")]


@pytest.mark.parametrize("args, msg", [
    (["--tokens-per-step", "32kb"], "--tokens-per-step '32kb' is not a token budget"),
    (["--tokens-per-step", "100"], "is not a token budget"),
    (["--grad-ckpt", "sometimes"], "--grad-ckpt: sometimes is not one of on, off, auto"),
    (["--attn", "flash"], "--attn: flash is not one of sdpa, eager, flex_attention"),
    (["--liger", "yes"], "--liger: yes is not one of off, on"),
    (["--layouts", "padded"], "--layouts: padded is not one of packed, unpacked"),
])
def test_a_bad_sweep_value_is_refused_before_anything_runs(args, msg):
    r = run_script(BENCH, "--corpus", *args, "--check-args", timeout=120)
    assert r.returncode == 2 and msg in r.stderr, r.stderr[-2000:]


def test_the_bench_offers_the_configs_attention_implementations():
    from bench_train_gpu import ATTN_IMPLEMENTATIONS as bench

    from automon.config.train import ATTN_IMPLEMENTATIONS

    assert bench == ATTN_IMPLEMENTATIONS


@pytest.mark.slow  # four training cells, each in its own (warm) process
def test_a_corpus_sweep_records_each_cells_options_and_stops_at_its_deadline(tmp_path, tiny_model_path):
    """On CPU with the tiny model (plumbing: the figures need a GPU): each cell trains with its budget and its
    gradient checkpointing (auto: off on CPU), the record names them, is written after every cell, and a cell that
    would end after --deadline-s is recorded as skipped, not run."""
    record = synthetic_corpus_record(tmp_path / "corpus.json")
    out = tmp_path / "sweep.json"
    common = ["--corpus", str(record), "--tiny", "--allow-cpu", "--trainers", "peft", "--layouts", "packed",
              "--warmup", "1", "--steps", "1", "--model-dir", str(tiny_model_path), "--out", str(out),
              "--python", warm_launcher(dict(os.environ))]
    r = run_script(BENCH, *common, "--tokens-per-step", "256,512", "--grad-ckpt", "on,auto", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["complete"] and rep["tokens_per_step"] == [256, 512] and rep["sweep"]["grad_ckpt"] == ["on", "auto"]
    got = [(c["tokens_per_step"], c["gradient_checkpointing_asked"], c["gradient_checkpointing"], c["status"])
           for c in rep["results"]]
    assert got == [(256, "on", True, "ok"), (256, "auto", False, "ok"), (512, "on", True, "ok"),
                   (512, "auto", False, "ok")]
    assert all(c["attn_implementation"] == "sdpa" and c["liger"] is False for c in rep["results"])
    assert all(c["computed_tokens"] <= c["timed_micro_batches"] * c["tokens_per_step"] for c in rep["results"])

    r = run_script(BENCH, *common, "--tokens-per-step", "256", "--deadline-s", "1", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (cell,) = json.loads(out.read_text())["results"]
    assert cell["status"] == "skipped" and "--deadline-s 1" in cell["error"]
