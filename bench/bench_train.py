"""What a training epoch computes on the real corpus, packed vs unpacked (CPU; no model runs).

Usage:
    python bench/bench_train.py                                   # data/builds/default, subset=all
    python bench/bench_train.py --build data/builds/default --subsets sg_code,syco_qa
    python bench/bench_train.py --limit 20000                     # a seeded sample of 20,000 examples (quicker)

The examples are exactly what train/sft.py trains on: the build's training split rendered with the
prompt and tokenised by automon.training.data.ExampleBuilder (the Qwen3 tokenizer of model=tiny, the real
vocabulary; responses shortened in the middle to max_seq_length). Then, without running a model:

- packed (train.packing=true, the default): the packs train/sft.py would make on a GPU
  (automon.training.packing.plan_packs, budget train.tokens_per_step = max_seq_length unless given: the
  CUDA default; on CPU it is 4,096);
- unpacked (train.packing=false, the training before packing): the micro-batches of `batch_size`
  examples in the trainer's own order (the seeded length-grouped sampler), each padded to its longest.

Reported for both: examples, useful tokens (the examples' own), computed tokens (what the model runs on,
padding included) and useful/computed, micro-batches, tokens per micro-batch and per optimizer step,
and a projected H100 epoch time: computed tokens / the tokens/s that bench_train_gpu.py recorded on an
H100 at the nearest tokens per micro-batch (bench/results/train_gpu_*.json; 4k, 16k and 32k-token single
sequences). The recorded points are full-length causal sequences; a projection is therefore only a
bound, and says which: packs of short examples need less attention than one 32k sequence (the packed
projection is an upper bound on time), and micro-batches far below 4k tokens run less efficiently than
4k (the unpacked projection is a lower bound). `bench_train_gpu.py --corpus` measures both on a GPU.
Writes bench/results/train_corpus_<build>.json.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
GPU_RECORDS = {t: REPO / "bench" / "results" / f"train_gpu_qwen3_4b_nvidia_h100_80gb_hbm3_{t}.json"
               for t in ("unsloth", "peft")}


def tiny_model_cfg():
    """model=tiny's ModelConfig as train/sft.py composes it (the Qwen3 tokenizer, built offline)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from automon.config.train import register

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return OmegaConf.to_object(compose(config_name="sft", overrides=["model=tiny"])).model


def corpus_lengths(build_dir: str, subsets: list[str] | None, prompt: str, max_seq_length: int,
                   limit: int | None, seed: int) -> tuple[list[int], dict]:
    """Token lengths of the training examples train/sft.py would make, and the build's identity."""
    import random

    from automon.data.io import load_build
    from automon.models.loading import load_tokenizer
    from automon.schema import SUBSETS
    from automon.training.data import ExampleBuilder, select_samples

    build = load_build(build_dir)
    samples = select_samples(build.samples("train"), subsets or list(SUBSETS))
    n_all = len(samples)
    if limit and limit < len(samples):
        samples = random.Random(seed).sample(samples, limit)
    mc = tiny_model_cfg()
    tok = load_tokenizer(mc)
    builder = ExampleBuilder(tok, prompt, mc.enable_thinking, min(max_seq_length, mc.max_position_embeddings))
    _, stats, _ = builder.build_dataset(samples, decode_first=0)
    return stats.lengths, {"build": str(build.path), "manifest_sha256": build.manifest_hash,
                           "corpus_examples": n_all, "summary": stats.summary()}


def packed_micro_batches(lengths: list[int], budget: int, seed: int) -> list[int]:
    """Tokens of every packed micro-batch (no padding)."""
    from automon.training.packing import plan_packs

    return [sum(lengths[i] for i in p) for p in plan_packs(lengths, budget, seed)]


def unpacked_micro_batches(lengths: list[int], batch_size: int, grad_accum: int, seed: int,
                           group_by_length: bool = True) -> list[tuple[int, int]]:
    """(useful, computed) tokens of every unpacked micro-batch, in the trainer's epoch-0 order: TRL's
    collator pads each micro-batch to its longest example."""
    from automon.training.trainers import SeededLengthGroupedSampler, SeededShuffleSampler

    sampler = (SeededLengthGroupedSampler(lengths, batch_size * grad_accum, seed) if group_by_length
               else SeededShuffleSampler(len(lengths), seed))
    sampler.set_epoch(0)
    order = list(sampler)
    out = []
    for k in range(0, len(order), batch_size):
        batch = [lengths[i] for i in order[k:k + batch_size]]
        out.append((sum(batch), len(batch) * max(batch)))
    return out


def recorded_tokens_per_s(trainer: str) -> dict[int, float]:
    """tokens/s by tokens per micro-batch, from the recorded H100 run (empty when absent)."""
    p = GPU_RECORDS[trainer]
    if not p.exists():
        return {}
    rep = json.loads(p.read_text())
    return {r["seq_len"] * r.get("batch_size", 1): r["tokens_per_s"] for r in rep["results"] if r["status"] == "ok"}


def projection(computed_tokens: int, tokens_per_micro_batch: float, trainer: str) -> dict | None:
    rates = recorded_tokens_per_s(trainer)
    if not rates:
        return None
    point = min(rates, key=lambda t: abs(t - tokens_per_micro_batch))
    side = ("the recorded point is a full-length sequence: packed short examples need less attention, so "
            "this is an upper bound on time" if tokens_per_micro_batch >= point * 0.5 else
            f"micro-batches of {tokens_per_micro_batch:,.0f} tokens run less efficiently than the smallest "
            f"recorded point ({point:,} tokens): this is a lower bound on time")
    return {"trainer": trainer, "recorded_point_tokens": point, "recorded_tokens_per_s": round(rates[point], 1),
            "epoch_hours": round(computed_tokens / rates[point] / 3600, 2), "bound": side,
            "record": str(GPU_RECORDS[trainer].relative_to(REPO))}


def summarise(useful: int, computed: int, micro: int, grad_accum: int, n: int, extra: dict) -> dict:
    steps = -(-micro // grad_accum)
    return {"examples": n, "useful_tokens": useful, "computed_tokens": computed,
            "useful_over_computed": round(useful / computed, 4), "micro_batches": micro, "grad_accum": grad_accum,
            "optimizer_steps_per_epoch": steps, "tokens_per_micro_batch": round(computed / micro, 1),
            "useful_tokens_per_optimizer_step": round(useful / steps, 1),
            "examples_per_optimizer_step": round(n / steps, 2), **extra}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="data/builds/default")
    ap.add_argument("--subsets", default="", help="comma-separated; default: all")
    ap.add_argument("--prompt", default="direct_v1")
    ap.add_argument("--max-seq-length", type=int, default=32768)
    ap.add_argument("--tokens-per-step", type=int, default=None, help="pack budget (default: max_seq_length)")
    ap.add_argument("--grad-accum", type=int, default=None, help="packed (default 1, as train.grad_accum=null)")
    ap.add_argument("--batch-size", type=int, default=2, help="unpacked examples per micro-batch (default 2)")
    ap.add_argument("--unpacked-grad-accum", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="a seeded sample of this many examples")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from automon.training.packing import PACKING_VERSION
    from automon.versions import code_version

    t0 = time.perf_counter()
    subsets = [s for s in args.subsets.split(",") if s] or None
    lengths, build = corpus_lengths(args.build, subsets, args.prompt, args.max_seq_length, args.limit, args.seed)
    t_tok = time.perf_counter() - t0
    budget = args.tokens_per_step or min(args.max_seq_length, 40960)
    useful, n = sum(lengths), len(lengths)

    packs = packed_micro_batches(lengths, budget, args.seed)
    ga = args.grad_accum or 1
    packed = summarise(useful, sum(packs), len(packs), ga, n, {
        "packing": PACKING_VERSION, "tokens_per_step": budget,
        "pack_fill": round(useful / sum(max(budget, p) for p in packs), 4),
        "examples_over_budget": sum(1 for x in lengths if x > budget)})
    ub = unpacked_micro_batches(lengths, args.batch_size, args.unpacked_grad_accum, args.seed)
    unpacked = summarise(useful, sum(c for _, c in ub), len(ub), args.unpacked_grad_accum, n,
                         {"batch_size": args.batch_size, "group_by_length": True})
    ur = unpacked_micro_batches(lengths, args.batch_size, args.unpacked_grad_accum, args.seed, group_by_length=False)
    unpacked_random = summarise(useful, sum(c for _, c in ur), len(ur), args.unpacked_grad_accum, n,
                                {"batch_size": args.batch_size, "group_by_length": False})
    # With --limit the figures are the sample's; an epoch of the whole corpus is the sample's tokens scaled by
    # corpus examples / sampled examples (said so in the record).
    scale = build["corpus_examples"] / n
    for rec in (packed, unpacked):
        rec["projected_h100_epoch"] = [p for t in ("unsloth", "peft")
                                       if (p := projection(round(rec["computed_tokens"] * scale),
                                                           rec["tokens_per_micro_batch"], t))]

    ls = sorted(lengths)
    report = {"benchmark": "train_corpus", "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "host": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cpus", "code_version": code_version(),
              "command": " ".join([Path(sys.executable).name, *sys.argv]), "build": build,
              "subsets": subsets or "all", "limit": args.limit, "sampled_examples": n,
              "corpus_examples": build["corpus_examples"],
              "epoch_useful_tokens": round(useful * scale),
              "epoch_scaled_from_sample": scale != 1, "prompt": args.prompt, "seed": args.seed,
              "max_seq_length": args.max_seq_length, "tokenizer": "Qwen3 (model=tiny's, the real vocabulary)",
              "lengths": {"mean": round(useful / n, 1), "p50": ls[n // 2], "p90": ls[int(0.9 * n)],
                          "p99": ls[int(0.99 * n)], "max": ls[-1]},
              "tokenise_s": round(t_tok, 1), "packed": packed, "unpacked": unpacked,
              "unpacked_random_order": unpacked_random,
              # the exact length distribution (tokens: examples), which bench_train_gpu.py --corpus draws from
              "length_histogram": {str(k): v for k, v in sorted(Counter(lengths).items())}}
    slug = Path(build["build"]).name + (f"_{args.limit}" if args.limit else "") + \
        (f"_{'+'.join(subsets)}" if subsets else "")
    out = Path(args.out) if args.out else REPO / "bench" / "results" / f"train_corpus_{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    if scale != 1:
        print(f"a seeded sample of {n:,} of the corpus's {build['corpus_examples']:,} examples; epoch projections "
              f"scale its tokens by {scale:.3f}")
    print(f"{n:,} examples, {useful:,} useful tokens; lengths mean {report['lengths']['mean']}, p50 "
          f"{report['lengths']['p50']}, p90 {report['lengths']['p90']}, p99 {report['lengths']['p99']}, "
          f"max {report['lengths']['max']} (tokenised in {t_tok:.0f} s)")
    print(f"{'':24} {'computed':>13} {'useful/comp':>11} {'micro-b.':>9} {'tok/micro':>10} {'tok/step':>10} "
          f"{'steps':>7}")
    for name, r in (("packed", packed), ("unpacked (grouped)", unpacked), ("unpacked (random)", unpacked_random)):
        print(f"{name:24} {r['computed_tokens']:>13,} {r['useful_over_computed']:>11.3f} {r['micro_batches']:>9,} "
              f"{r['tokens_per_micro_batch']:>10,.0f} {r['useful_tokens_per_optimizer_step']:>10,.0f} "
              f"{r['optimizer_steps_per_epoch']:>7,}")
    for name, r in (("packed", packed), ("unpacked", unpacked)):
        for p in r["projected_h100_epoch"]:
            print(f"projected H100 epoch, {name}, {p['trainer']}: {p['epoch_hours']} h at the recorded "
                  f"{p['recorded_tokens_per_s']:,.0f} tokens/s ({p['recorded_point_tokens']:,}-token point; {p['bound']})")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
