"""Benchmark: model time vs harness time of a held-out evaluation on CPU (hf backend, model=tiny).

Usage:
    python bench/bench_eval.py                        # 3,010 synthetic test samples, 3 repeats
    python bench/bench_eval.py --data data/builds/default  # a real build's test split instead
    python bench/bench_eval.py --repeats 5 --adapter none

Every repeat runs the whole evaluation (render, score, metrics, report) with a fresh prediction cache.
Model time = inside the model's forward passes; load = reading model, adapter and tokenizer; harness =
everything else (build reading, rendering, tokenising, batching/padding, cache writes, metrics with
1,000 bootstrap replicates, report and figures). Prints medians over repeats; the target is
harness < 10% of model time. The synthetic set has the paper's sizes (1,505 pairs over six subsets)
with text lengths drawn per subset (SubsetSpec.median_words); results on a real build are the ones to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

# Median words of (request, response) per subset are its SubsetSpec.median_words: an assumption standing in
# for the real sources (HH-RLHF turns, SVEN functions, TruthfulQA/MMLU with a cue, GSM8K solutions,
# MBPP/HumanEval with tests); DEFAULT_LENGTHS for a subset without them.
DEFAULT_LENGTHS = (80, 100)
_VOCAB = ("the of and to in is that for it as with was on be by this are or from at which an not but have "
          "has were all their can if will one would there what so about more when out up into do no time only "
          "def return self value result list index test assert print import range len int str dict None True "
          "answer question user assistant think correct because therefore number total each step first then "
          "function code input output error check file data model train score reward pass bonus review note "
          "harm safe request help please sure cannot provide instructions information people could should").split()


def synthetic_build(out: Path, scale: float = 1.0, seed: int = 0) -> Path:
    from automon.data.io import write_build
    from automon.schema import SUBSETS, Sample
    from automon.subsets import default_test_pairs
    from automon.subsets import get as subset_spec

    rng = random.Random(seed)

    def words(median: int) -> str:
        n = max(5, min(4000, int(rng.lognormvariate(0, 0.6) * median)))
        return " ".join(rng.choice(_VOCAB) for _ in range(n))

    test, train = [], []
    for sub, n_pairs in default_test_pairs().items():  # the paper's sizes
        cat, task = SUBSETS[sub]
        rq, rs = subset_spec(sub).median_words or DEFAULT_LENGTHS
        for k in range(max(1, int(n_pairs * scale))):
            req = f"{sub} {k}: " + words(rq)
            for label in (1, 0):
                sid = f"bench-{sub}-{k}-{label}"
                test.append(Sample(sid, f"pair-{sub}-{k}", "test", cat, task, sub, f"bench:{sid}", req,
                                   words(rs), label))
        for k in range(20):
            sid = f"bench-train-{sub}-{k}"
            train.append(Sample(sid, None, "train", cat, task, sub, f"bench:{sid}", words(20), words(30), k % 2))
    write_build(out, train, test, {"seed": seed, "recipe": "bench/bench_eval.py synthetic"}, overwrite=True)
    return out


def tiny_adapter(out: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support import make_adapter

    return make_adapter(out)  # recorded as trained on support's default subset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="a build directory (default: a synthetic 3,010-sample build)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--adapter", default="tiny", help="'tiny' (a random LoRA on the tiny model), 'none', or a dir")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the paper's test size (synthetic only)")
    ap.add_argument("--json", help="also write the medians to this JSON file")
    args = ap.parse_args()

    import torch

    from automon.config.common import ModelConfig, WandbConfig
    from automon.config.eval import EvalDataConfig, HoldoutConfig
    from automon.evaluation import evaluate
    from automon.backends.hf import HFConfig

    tmp = Path(tempfile.mkdtemp(prefix="bench_eval_"))
    data = Path(args.data) if args.data else synthetic_build(tmp / "build", args.scale)
    adapter = None
    if args.adapter == "tiny":
        adapter = str(tiny_adapter(tmp / "run" / "adapter"))
    elif args.adapter != "none":
        adapter = args.adapter
    runs = []
    for rep in range(args.repeats):
        cfg = HoldoutConfig(model=ModelConfig(name="tiny", pretrained="tiny", dtype="float32"),
                            backend=HFConfig(batch_size=args.batch_size, chunk_size=256),
                            data=EvalDataConfig(dir=str(data)), wandb=WandbConfig(mode="disabled"), adapter=adapter,
                            output_dir=str(tmp / f"out{rep}"), progress=False)
        t = evaluate(cfg).timings
        n = len((tmp / f"out{rep}" / "predictions.jsonl").read_text().splitlines())
        t["samples"] = n
        t["batching_s"] = t["score_loop_s"] - t["model_s"] - t["tokenize_s"]
        runs.append(t)
        print(f"repeat {rep + 1}/{args.repeats}: {n} samples, model {t['model_s']:.1f} s, "
              f"harness {t['harness_s']:.1f} s, load {t['load_s']:.1f} s, total {t['total_s']:.1f} s", flush=True)

    keys = ["model_s", "harness_s", "load_s", "total_s", "data_s", "render_s", "tokenize_s", "batching_s",
            "metrics_s", "report_s", "prompt_tokens", "samples"]
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads), load average {load_avg:.2f}")
    print(f"data: {'synthetic (bench/bench_eval.py)' if not args.data else data}; {int(med['samples'])} samples, "
          f"{int(med['prompt_tokens']):,} prompt tokens; adapter: {args.adapter}; medians of {len(runs)} repeats")
    print(f"  model time     {med['model_s']:8.2f} s   ({med['samples'] / med['model_s']:.0f} samples/s, "
          f"{med['prompt_tokens'] / med['model_s']:,.0f} prompt tokens/s)")
    share = 100 * med["harness_s"] / med["model_s"]
    print(f"  harness time   {med['harness_s']:8.2f} s   = {share:.1f}% of model time")
    for k, label in (("data_s", "read build"), ("render_s", "render prompts"), ("tokenize_s", "tokenise"),
                     ("batching_s", "batch/pad/cache"), ("metrics_s", "metrics+bootstrap"),
                     ("report_s", "report+figures")):
        print(f"    {label:18s} {med[k]:8.2f} s")
    print(f"  load (weights) {med['load_s']:8.2f} s   (once per run; not harness)")
    print(f"  wall total     {med['total_s']:8.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"medians": med, "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
