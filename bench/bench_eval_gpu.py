"""GPU benchmark: the hf backend scoring the held-out set with a randomly initialised Qwen3-4B.

Usage:
    python bench/bench_eval_gpu.py                          # 3,010 synthetic samples, batch 16
    python bench/bench_eval_gpu.py --scale 0.25 --batch-size 32 --adapter
    python bench/bench_eval_gpu.py --scale 0.25 --adapters 3     # a sweep: base + 3 random adapters
    python bench/bench_eval_gpu.py --data data/builds/default    # a real build's test split

Needs a CUDA GPU: without one it prints SKIP and exits 0 (nothing is measured, nothing is written).
The model is bench_train_gpu.py's (make_model_dir): Qwen3-4B's architecture (hidden 2560, 36 layers,
32 heads / 8 KV heads, head_dim 128, vocab 151,936) with random bf16 weights and the real Qwen3
tokenizer, so no download is needed; speed does not depend on the weights' values. Writes
bench/results/bench_eval_gpu-<gpu>-<UTC time>.json with samples/s, prompt tokens/s, the harness share
and peak GPU memory.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent

def random_adapters(model_dir: Path, outs: list[Path], subsets: list[str], manifest_hash: str,
                    r: int = 32) -> list[Path]:
    """One random LoRA (r, all linear layers) per out, each with other weights (seed = its index), the
    base model loaded once; each adapter's metadata names its subset and the build it scores."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from automon.adapter_meta import AdapterMeta

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    lora = LoraConfig(r=r, lora_alpha=r, task_type="CAUSAL_LM", init_lora_weights=False,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    for i, (out, subset) in enumerate(zip(outs, subsets)):
        torch.manual_seed(i)
        peft = get_peft_model(base, lora)
        peft.save_pretrained(out)
        base = peft.unload()  # the plain base model again, for the next adapter
        AdapterMeta(base_model="qwen3_4b_random", pretrained=str(model_dir), prompt="direct_v1",
                    enable_thinking=False, subset=subset, data_manifest_hash=manifest_hash, lora_rank=r,
                    automon_version="bench").write(out)
    return outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="a build directory (default: bench_eval.py's synthetic 3,010-sample build)")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-batch-tokens", type=int, default=65536)
    ap.add_argument("--adapter", action="store_true", help="score through a random LoRA (r=32) adapter")
    ap.add_argument("--adapters", type=int, default=0, metavar="N",
                    help="a sweep: the base model and N random adapters (one subset each), as a matrix")
    ap.add_argument("--workdir", help="where the 8 GB random model is written (default: a temp dir)")
    ap.add_argument("--out", help="result JSON path (default bench/results/bench_eval_gpu-<gpu>-<UTC time>.json)")
    ap.add_argument("--check-args", action="store_true",
                    help="check the arguments and exit 0: no torch, no GPU, nothing written")
    args = ap.parse_args()
    # checked before the 8 GB model is written
    if args.adapter and args.adapters:
        ap.error("--adapter scores one adapter, --adapters N a sweep: give one of them")
    from automon.schema import SUBSETS

    if args.adapters > len(SUBSETS):
        ap.error(f"--adapters: at most {len(SUBSETS)} (one per subset)")
    if args.check_args:
        print("bench_eval_gpu: arguments ok; nothing run", file=sys.stderr)
        return 0

    import torch

    if not torch.cuda.is_available():
        print("SKIP: bench_eval_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False); "
              "nothing was measured and no result file was written.")
        return 0

    sys.path.insert(0, str(HERE))
    from bench_eval import synthetic_build
    from bench_train_gpu import make_model_dir

    from automon.config.common import ModelConfig, WandbConfig
    from automon.config.eval import EvalDataConfig, HoldoutConfig
    from automon.evaluation import evaluate
    from automon.backends.hf import HFConfig
    from automon.data.io import load_build
    from automon.versions import code_version, library_versions

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_eval_gpu_"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = make_model_dir("qwen3_4b", work / "qwen3_4b_random")  # the training bench's random Qwen3-4B
    data = Path(args.data) if args.data else synthetic_build(work / "build", args.scale)
    manifest_hash = load_build(data).manifest_hash
    adapter = sweep = None
    if args.adapter:
        adapter = str(random_adapters(model_dir, [work / "run" / "adapter"], ["safety_code"], manifest_hash)[0])
    if args.adapters:
        subsets = list(SUBSETS)[:args.adapters]
        sweep = work / "sweep"
        random_adapters(model_dir, [sweep / f"random-{s}" / "adapter" for s in subsets], subsets, manifest_hash)
    cfg = HoldoutConfig(
        model=ModelConfig(name="qwen3_4b_random", pretrained=str(model_dir), dtype="bfloat16"),
        backend=HFConfig(device="cuda", batch_size=args.batch_size,
                         max_batch_tokens=args.max_batch_tokens, chunk_size=512),
        data=EvalDataConfig(dir=str(data)), wandb=WandbConfig(mode="disabled"), adapter=adapter,
        sweep_dir=str(sweep) if sweep else None,
        output_dir=str(work / "out"), cache_dir=str(work / f"cache-{dt.datetime.now().timestamp()}"),
        progress=True)
    torch.cuda.reset_peak_memory_stats()
    res = evaluate(cfg)
    t = res.timings
    n = len(res.predictions[res.monitors[0].name])        # samples per monitor
    scored = sum(len(res.predictions[m.name]) for m in res.monitors)
    gpu = torch.cuda.get_device_name(0)
    out = {
        "gpu": gpu, "torch": torch.__version__, "host": platform.node(),
        "data": "synthetic" if not args.data else str(data),
        "samples": n, "monitors": [m.name for m in res.monitors], "scored": scored,
        "prompt_tokens": t.get("prompt_tokens"), "batch_size": args.batch_size,
        "adapter": bool(adapter), "model": "Qwen3-4B architecture, random bf16 weights",
        "model_s": t["model_s"], "harness_s": t["harness_s"], "load_s": t["load_s"], "total_s": t["total_s"],
        "samples_per_s": scored / t["model_s"], "prompt_tokens_per_s": t.get("prompt_tokens", 0) / t["model_s"],
        "harness_share_of_model": t["harness_s"] / t["model_s"],
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30, "timings": t,
        "versions": {"code_version": code_version(), **library_versions()},
    }
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-")
    path = Path(args.out) if args.out else results / f"bench_eval_gpu-{slug}-{stamp}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{gpu}: {len(res.monitors)} monitor(s) x {n} samples, {out['samples_per_s']:.1f} samples/s, "
          f"{out['prompt_tokens_per_s']:,.0f} prompt tokens/s, harness {100 * out['harness_share_of_model']:.1f}% "
          f"of model time, peak {out['peak_gpu_memory_gib']:.1f} GiB")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
