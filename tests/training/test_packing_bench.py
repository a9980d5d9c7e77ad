"""bench/bench_train.py (what an epoch computes, packed vs unpacked, on a build's own lengths) and the
`--corpus` mode of bench/bench_train_gpu.py (its plumbing on CPU; the figures need a GPU)."""

from __future__ import annotations

import json
import os

import pytest
from support import REPO, has_cuda, run_script, synthetic_corpus_record, warm_launcher


def test_corpus_report_on_a_build(small_build, tmp_path):
    out = tmp_path / "corpus.json"
    r = run_script(REPO / "bench" / "bench_train.py", "--build", str(small_build), "--max-seq-length", "1024",
                   "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    packed, unpacked = rep["packed"], rep["unpacked"]
    n = rep["build"]["summary"]["samples"]
    assert packed["examples"] == unpacked["examples"] == n == sum(rep["length_histogram"].values())
    assert packed["useful_tokens"] == unpacked["useful_tokens"] == rep["build"]["summary"]["tokens"]
    assert packed["computed_tokens"] == packed["useful_tokens"] and packed["useful_over_computed"] == 1.0
    assert unpacked["computed_tokens"] >= unpacked["useful_tokens"]          # padding to the longest
    assert packed["tokens_per_step"] == 1024 and packed["grad_accum"] == 1 and unpacked["grad_accum"] == 8
    assert packed["micro_batches"] < unpacked["micro_batches"] == -(-n // 2)
    assert packed["tokens_per_micro_batch"] > unpacked["tokens_per_micro_batch"]
    for p in packed["projected_h100_epoch"]:                                  # from the recorded H100 runs
        assert p["recorded_point_tokens"] == 4096 and "bound" in p["bound"]
    assert "packed" in r.stdout and "unpacked (grouped)" in r.stdout


@pytest.mark.slow  # two training cells, each in its own process
def test_gpu_corpus_mode_plumbing_on_cpu(tmp_path, tiny_model_path):
    record = synthetic_corpus_record(tmp_path / "corpus.json")
    out = tmp_path / "gpu.json"
    r = run_script(REPO / "bench" / "bench_train_gpu.py", "--corpus", str(record), "--tiny", "--allow-cpu",
                   "--trainers", "peft", "--warmup", "1", "--steps", "1", "--tokens-per-step", "512",
                   "--model-dir", str(tiny_model_path), "--out", str(out),
                   "--python", warm_launcher(dict(os.environ)), timeout=900)  # its cells warm too
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    cells = {c["mode"]: c for c in rep["results"]}
    assert set(cells) == {"packed", "unpacked"} and all(c["status"] == "ok" for c in cells.values())
    p, u = cells["packed"], cells["unpacked"]
    assert p["grad_accum"] == 1 and p["batch_size"] == 1 and u["grad_accum"] == 8 and u["batch_size"] == 2
    assert p["computed_tokens"] == p["useful_tokens"] <= 512 and u["timed_examples"] == 16
    assert p["timed_examples"] > 1 and p["model_flops"] > 0 and p["mfu"] is None   # no GPU: not measured
    assert "speedup_over_unpacked" in p and p["epoch_hours_subset_all"] > 0
    assert rep["flops_formula"].startswith("sum over examples")


@pytest.mark.skipif(has_cuda(), reason="checks the no-CUDA path")
def test_gpu_corpus_mode_skips_without_cuda(tmp_path):
    """bench_train_gpu.py --corpus on a machine without CUDA says so and writes nothing (exit 0), like the
    fixed-length mode: no GPU figure is made up on CPU."""
    out = tmp_path / "x.json"
    r = run_script(REPO / "bench" / "bench_train_gpu.py", "--corpus", "--out", str(out), timeout=300)
    assert r.returncode == 0 and "skipped: no CUDA device" in r.stderr, r.stderr[-3000:]
    assert not out.exists()


def test_gpu_corpus_mode_without_a_corpus_record_says_how_to_make_one(tmp_path, tiny_model_path):
    r = run_script(REPO / "bench" / "bench_train_gpu.py", "--corpus", str(tmp_path / "missing.json"), "--tiny",
                   "--allow-cpu", "--model-dir", str(tiny_model_path), "--out", str(tmp_path / "x.json"), timeout=300)
    assert r.returncode == 2 and "run python bench/bench_train.py first" in r.stderr, r.stderr[-3000:]
    assert not (tmp_path / "x.json").exists()


def test_docs_quote_the_corpus_record():
    """docs/training.md and bench/README.md quote bench/results/train_corpus_default.json's table as it is."""
    rec = json.loads((REPO / "bench" / "results" / "train_corpus_default.json").read_text())
    p, u, r = rec["packed"], rec["unpacked"], rec["unpacked_random_order"]
    want = {
        "useful / computed tokens": (f"{p['useful_over_computed']:.3f}",
                                     f"{u['useful_over_computed']:.3f} ({r['useful_over_computed']:.3f} without length grouping)"),
        "micro-batches (forward/backward)": (f"{p['micro_batches']:,}", f"{u['micro_batches']:,}"),
        "tokens per micro-batch": (f"{p['tokens_per_micro_batch']:,.0f}", f"{u['tokens_per_micro_batch']:,.0f}"),
        "optimizer steps": (f"{p['optimizer_steps_per_epoch']:,}", f"{u['optimizer_steps_per_epoch']:,}"),
        "examples per optimizer step": (f"{p['examples_per_optimizer_step']:.1f}", f"{u['examples_per_optimizer_step']:.1f}"),
        "useful tokens per optimizer step": (f"{p['useful_tokens_per_optimizer_step']:,.0f}",
                                             f"{u['useful_tokens_per_optimizer_step']:,.0f}"),
        "pack fill (tokens / budget)": (f"{p['pack_fill']:.3f}", ""),
    }
    for doc in ("docs/training.md", "bench/README.md"):
        text = (REPO / doc).read_text()
        assert f"| per epoch ({p['examples']:,} examples) |" in text, doc
        rows = {c[0]: tuple(c[1:3]) for line in text.splitlines() if line.startswith("| ")
                for c in [[x.strip() for x in line.strip("|").split("|")]] if c[0] in want}
        assert rows == want, doc
    readme = (REPO / "bench/README.md").read_text()
    for layout in ("packed", "unpacked"):                  # the projected H100 epochs, with the kind of bound
        for q in rec[layout]["projected_h100_epoch"]:
            bound = "upper" if "upper bound" in q["bound"] else "lower"
            assert (f"| {layout} | {q['trainer']} | {q['recorded_point_tokens']:,} | {q['recorded_tokens_per_s']:,.0f} | "
                    f"{q['epoch_hours']:.2f} h | {bound} |") in readme, (layout, q["trainer"])
    lengths = rec["lengths"]
    assert (f"an example is {lengths['mean']} tokens on average (p50 {lengths['p50']}, p90 {lengths['p90']}, "
            f"p99 {lengths['p99']}, longest {lengths['max']:,};") in " ".join((REPO / "docs/training.md").read_text().split())
