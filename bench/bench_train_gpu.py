"""GPU training benchmark: Unsloth vs plain TRL + PEFT (SDPA), LoRA SFT of a randomly initialised Qwen3.

Usage:
    python bench/bench_train_gpu.py                                  # unsloth and peft, 4k/16k/32k tokens
    python bench/bench_train_gpu.py --trainers peft --lengths 4096,16384 --steps 8
    python bench/bench_train_gpu.py --model qwen3_8b                 # Qwen3-8B shapes instead of 4B
    python bench/bench_train_gpu.py --tiny --allow-cpu               # plumbing check on CPU (numbers meaningless)
    python bench/bench_train_gpu.py --corpus                         # the real corpus's lengths, packed vs unpacked
    python bench/bench_train_gpu.py --corpus --layouts packed --tokens-per-step 16k,32k,64k,128k --grad-ckpt off,on
    python bench/bench_train_gpu.py --corpus --trainers peft --attn flex_attention,sdpa --liger on,off
    python bench/bench_train_gpu.py --corpus ... --check-args        # the cells it would run; no torch, no GPU

`--corpus [RECORD]` trains on the corpus's own length distribution instead of fixed-length samples: the
exact histogram that bench/bench_train.py recorded from the local build (default
bench/results/train_corpus_default.json), drawn with a seed, one synthetic example per drawn length
(random tokens, the last 3 carry the loss). Each trainer runs twice through train/sft.py's own path:
packed (train.packing=true, `--tokens-per-step`, one pack per optimizer step) and as before packing
(train.packing=false: 2 examples per micro-batch x 8, length-grouped). Per cell: useful tokens/s (the
examples' tokens; padding is not counted), MFU with the FLOPs of each example at its own length
(4N + 6*L*d_attn*len per token: packed examples do not attend to each other), peak memory, and the epoch
time of subset=all (the record's useful tokens / tokens/s). Results go to
bench/results/train_gpu_corpus_<model>_<gpu>.json.

The training options are swept as lists, each value the config key's: `--tokens-per-step` (train.tokens_per_step,
packed cells; 16k = 16,384), `--grad-ckpt` on/off/auto (trainer.gradient_checkpointing), and for the peft trainer
`--attn` (trainer.attn_implementation: flex_attention / flash_attention_2 pack without a dense mask) and `--liger`
on/off (trainer.liger). Cells are their product, in the order: trainer, layout, budget, attention, Liger,
checkpointing (Unsloth picks its own attention and kernels: its cells take neither). `--deadline-s` stops starting
cells that would end after it (they are recorded as skipped) and caps each cell's timeout; the record is written
after every cell, so a stopped sweep keeps what it measured. `--check-args` checks the arguments and prints the
cells, and exits without importing torch.

Each (trainer, length) cell runs in a fresh process through automon's own trainer plug-ins
(automon.training.trainers: the same model loading, LoRA config, loss and trainer class as
train/sft.py), on `--batch-size` synthetic samples (default 1) per step of exactly `length` tokens
each, whose last 3 tokens carry the loss (as a yes/no answer + end-of-turn does). The model is Qwen3-4B's (or 8B's)
architecture from its published config, randomly initialised in bf16 (no hub access needed).

Reported per cell: mean / median step time over the timed steps (after warm-up, CUDA-synchronised),
tokens/s, peak GPU memory (allocated and reserved), and MFU = model FLOPs/s / 989 TFLOP/s (H100 SXM
bf16 dense) with model FLOPs per token = 4N + 3 * 2 * L * d_attn * s
(N = non-embedding parameters, L layers, d_attn = heads x head_dim, s = sample length; LoRA FLOPs and
gradient-checkpointing recompute are not model FLOPs). An out-of-memory cell is recorded as such.

Without CUDA it prints why and exits 0 without writing anything (unless --tiny --allow-cpu).
Results go to bench/results/train_gpu_<model>_<gpu>.json; nothing is ever estimated or filled in.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from automon.config.train import ATTN_IMPLEMENTATIONS, token_budget

REPO = Path(__file__).resolve().parents[1]
H100_BF16_PEAK = 989e12  # dense bf16 FLOP/s, H100 SXM spec (the H200's is the same)

# Published architectures (huggingface.co/Qwen/Qwen3-4B and Qwen3-8B config.json).
ARCH = {
    "qwen3_4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3_8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, tie_word_embeddings=True),
}
ANSWER_TOKENS = 3


def model_flops_per_token(n_non_embedding: int, layers: int, d_attn: int, seq_len: int) -> float:
    """4N (forward 2N + activation gradients 2N; frozen base gets no weight gradient) + causal attention
    forward 2*L*d_attn*s per token, x3 for forward + backward."""
    return 4.0 * n_non_embedding + 3.0 * 2.0 * layers * d_attn * seq_len


def gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


# ---------------------------------------------------------------------------------------------
# model directory (random weights, real tokenizer)

def make_model_dir(model: str, out: Path) -> Path:
    """Random-init weights for `model`'s architecture + the real Qwen3 tokenizer, saved as a HF dir."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from automon.models.tiny import build_qwen3_tokenizer

    if (out / "bench_model.json").exists() or (out / "config.json").exists():
        return out  # built before, or an existing HF model directory passed with --model-dir
    tok = build_qwen3_tokenizer()
    cfg = Qwen3Config(vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None, **ARCH[model])
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        m = Qwen3ForCausalLM(cfg).to(dtype)
    out.mkdir(parents=True, exist_ok=True)
    m.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "bench_model.json").write_text(json.dumps({"model": model, "random_init_seed": 0}))
    return out


# ---------------------------------------------------------------------------------------------
# one cell, in its own process

def worker(trainer_name: str, seq_len: int, model_dir: str, warmup: int, steps: int, lora_r: int,
           grad_ckpt: bool, batch_size: int = 1) -> dict:
    from automon.training.trainers import get_trainer

    plugin = get_trainer(trainer_name)
    plugin.prepare()  # unsloth must be imported before transformers

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from automon.config.common import ModelConfig
    from automon.config.train import SFTConfig
    from automon.training.sft_args import make_sft_args

    on_cuda = torch.cuda.is_available()
    tok = AutoTokenizer.from_pretrained(model_dir)
    g = torch.Generator().manual_seed(seq_len)
    n = (warmup + steps) * batch_size
    ids = torch.randint(1000, 150000, (n, seq_len), generator=g).tolist()
    labels = [[-100] * (seq_len - ANSWER_TOKENS) + row[-ANSWER_TOKENS:] for row in ids]
    ds = Dataset.from_dict({"input_ids": ids, "labels": labels, "length": [seq_len] * n})

    cfg = SFTConfig()
    cfg.model = ModelConfig(name="bench", pretrained=model_dir, dtype="bfloat16" if on_cuda else "float32",
                            max_position_embeddings=40960)
    cfg.trainer.name = trainer_name
    cfg.trainer.gradient_checkpointing = grad_ckpt
    cfg.train.lora.r = cfg.train.lora.alpha = lora_r
    cfg.train.batch_size, cfg.train.grad_accum, cfg.train.max_steps = batch_size, 1, warmup + steps
    cfg.train.warmup_ratio, cfg.train.save_steps, cfg.train.logging_steps = 0.0, 10**9, 10**9
    cfg.train.group_by_length = False
    cfg.train.packing = False  # exactly batch_size samples of seq_len tokens per step (--corpus packs)

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if on_cuda:
                torch.cuda.synchronize()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if on_cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as d:
        args = make_sft_args(cfg, Path(d), on_cuda, report_to=[])
        args.save_strategy = "no"
        trainer = plugin.build(cfg, model_dir, tok, ds, args, [StepTimer()], seq_len)
        model = trainer.model
        n_non_emb = sum(p.numel() for name, p in model.named_parameters()
                        if "lora_" not in name and "embed_tokens" not in name and "lm_head" not in name)
        text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        if on_cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()

    timed = times[warmup:]
    layers, d_attn = text_cfg.num_hidden_layers, text_cfg.num_attention_heads * text_cfg.head_dim
    rec = {"trainer": trainer_name, "seq_len": seq_len, "warmup_steps": warmup, "timed_steps": len(timed),
           "step_time_s_mean": statistics.mean(timed), "step_time_s_median": statistics.median(timed),
           "batch_size": batch_size, "tokens_per_s": batch_size * seq_len / statistics.mean(timed),
           "n_non_embedding": n_non_emb,
           "model_flops_per_token": model_flops_per_token(n_non_emb, layers, d_attn, seq_len),
           "gradient_checkpointing": grad_ckpt, "lora_r": lora_r, "status": "ok"}
    if on_cuda:
        rec["peak_mem_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        rec["peak_mem_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
        rec["mfu"] = rec["model_flops_per_token"] * rec["tokens_per_s"] / H100_BF16_PEAK
    else:
        rec["peak_mem_allocated_gib"] = rec["mfu"] = None  # no GPU: not measured
    return rec


# ---------------------------------------------------------------------------------------------
# --corpus: the real corpus's lengths, packed vs unpacked

DEFAULT_CORPUS = REPO / "bench" / "results" / "train_corpus_default.json"


def corpus_lengths(record: Path, n: int, seed: int, max_len: int) -> list[int]:
    """`n` lengths drawn (with replacement, seeded) from the recorded length histogram, capped at max_len."""
    import random

    hist = json.loads(Path(record).read_text())["length_histogram"]
    lengths, weights = [int(k) for k in hist], list(hist.values())
    return [min(x, max_len) for x in random.Random(seed).choices(lengths, weights=weights, k=n)]


GRAD_CKPT = {"on": True, "off": False, "auto": "auto"}


def corpus_worker(trainer_name: str, packed: bool, model_dir: str, warmup: int, steps: int, lora_r: int,
                  grad_ckpt: bool | str, record: str, tokens_per_step: int, max_len: int, seed: int = 0,
                  attn: str = "sdpa", liger: bool = False) -> dict:
    from automon.training.trainers import check_kernel_options, get_trainer

    plugin = get_trainer(trainer_name)
    plugin.prepare()

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from automon.config.common import ModelConfig
    from automon.config.train import SFTConfig
    from automon.training.sft_args import make_sft_args

    on_cuda = torch.cuda.is_available()
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = SFTConfig()
    cfg.model = ModelConfig(name="bench", pretrained=model_dir, dtype="bfloat16" if on_cuda else "float32",
                            max_position_embeddings=40960)
    cfg.trainer.name = trainer_name
    cfg.trainer.gradient_checkpointing = grad_ckpt
    cfg.trainer.attn_implementation, cfg.trainer.liger = attn, liger
    check_kernel_options(cfg, trainer_name, on_cuda)   # what train/sft.py refuses, this cell refuses alike
    cfg.train.lora.r = cfg.train.lora.alpha = lora_r
    cfg.train.max_seq_length = max_len
    cfg.train.packing, cfg.train.tokens_per_step = packed, tokens_per_step
    cfg.train.grad_accum = cfg.train.accumulation()       # 1 packed, 8 unpacked: the defaults
    cfg.train.max_steps = warmup + steps
    cfg.train.warmup_ratio, cfg.train.save_steps, cfg.train.logging_steps = 0.0, 10**9, 10**9

    # Enough examples for every timed step: a step takes tokens_per_step tokens packed, 16 examples unpacked.
    mean = statistics.mean(corpus_lengths(Path(record), 2000, seed, max_len))
    per_step = tokens_per_step / mean * 1.2 + 8 if packed else cfg.train.batch_size * cfg.train.grad_accum
    lengths = corpus_lengths(Path(record), int(per_step * (warmup + steps)) + 16, seed, max_len)
    g = torch.Generator().manual_seed(seed)
    eot = tok.convert_tokens_to_ids("<|im_end|>")   # answers end with the end of turn (the packed rows' check)
    ids = [torch.randint(1000, 150000, (n - 1,), generator=g).tolist() + [eot] for n in lengths]
    labels = [[-100] * (len(row) - ANSWER_TOKENS) + row[-ANSWER_TOKENS:] for row in ids]
    ds = Dataset.from_dict({"input_ids": ids, "labels": labels, "length": lengths})

    micro: list[list[int]] = []   # example lengths of every micro-batch, in training order

    def recording(collate):
        def wrapped(features):
            batch = collate(features)
            micro.append([int(x) for f in features for x in f.get("seq_lengths") or [len(f["input_ids"])]])
            return batch
        return wrapped

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if on_cuda:
                torch.cuda.synchronize()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if on_cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as d:
        args = make_sft_args(cfg, Path(d), on_cuda, report_to=[], trainer=trainer_name)
        args.save_strategy = "no"
        checkpointing = bool(args.gradient_checkpointing)   # auto resolved (Unsloth's plug-in clears the flag)
        trainer = plugin.build(cfg, model_dir, tok, ds, args, [StepTimer()], max_len)
        trainer.data_collator = recording(trainer.data_collator)
        model = trainer.model
        n_non_emb = sum(p.numel() for name, p in model.named_parameters()
                        if "lora_" not in name and "embed_tokens" not in name and "lm_head" not in name)
        text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        if on_cuda:
            torch.cuda.reset_peak_memory_stats()
        t_all = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t_all

    ga = cfg.train.grad_accum
    timed = micro[warmup * ga:(warmup + steps) * ga]
    layers, d_attn = text_cfg.num_hidden_layers, text_cfg.num_attention_heads * text_cfg.head_dim
    useful = sum(sum(m) for m in timed)
    computed = sum(len(m) * max(m) for m in timed) if not packed else useful   # unpacked: padded to the longest
    flops = sum(n * model_flops_per_token(n_non_emb, layers, d_attn, n) for m in timed for n in m)
    t = sum(times[warmup:])
    rec = {"trainer": trainer_name, "mode": "packed" if packed else "unpacked", "status": "ok",
           "tokens_per_step": tokens_per_step if packed else None, "grad_accum": ga,
           "batch_size": 1 if packed else cfg.train.batch_size, "warmup_steps": warmup,
           "timed_steps": len(times[warmup:]), "step_time_s_mean": t / max(len(times[warmup:]), 1),
           "timed_micro_batches": len(timed), "timed_examples": sum(len(m) for m in timed),
           "useful_tokens": useful, "computed_tokens": computed, "useful_tokens_per_s": useful / t,
           "model_flops": flops, "n_non_embedding": n_non_emb, "gradient_checkpointing": checkpointing,
           "gradient_checkpointing_asked": {True: "on", False: "off"}.get(grad_ckpt, grad_ckpt), "attn_implementation": attn if trainer_name == "peft" else None,
           "liger": liger, "lora_r": lora_r, "wall_s_with_packing_and_setup": round(wall, 1)}
    if on_cuda:
        rec["peak_mem_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        rec["peak_mem_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
        rec["mfu"] = flops / t / H100_BF16_PEAK
    else:
        rec["peak_mem_allocated_gib"] = rec["mfu"] = None
    return rec


def corpus_cells(args, trainers: list[str], budgets: list[int]) -> list[dict]:
    """The --corpus sweep's cells in the order they run: trainer, layout, budget (packed), attention, Liger,
    checkpointing; the peft trainer's attention and Liger values only for peft."""
    cells = []
    for trainer in trainers:
        for mode in args.layouts:
            for budget in (budgets if mode == "packed" else [None]):
                for attn in (args.attn if trainer == "peft" else [None]):
                    for liger in (args.liger if trainer == "peft" else ["off"]):
                        for gc in args.grad_ckpt:
                            cell = {"trainer": trainer, "mode": mode, "tokens_per_step": budget,
                                    "grad_ckpt": gc, "attn_implementation": attn, "liger": liger}
                            if cell not in cells:
                                cells.append(cell)
    return cells


def _variant(c: dict) -> str:
    parts = [c["mode"] + (f" {c['tokens_per_step']}" if c["tokens_per_step"] else ""), f"gc={c['grad_ckpt']}"]
    if c["attn_implementation"]:
        parts += [f"attn={c['attn_implementation']}", f"liger={c['liger']}"]
    return ", ".join(parts)


def _budgets(args, max_len: int) -> list[int]:
    return args.tokens_per_step or [max_len]


def run_corpus(args, model_dir: Path, model: str, trainers: list[str], cuda: bool, t_start: float) -> int:
    record = Path(args.corpus)  # main checked that it exists
    corpus = json.loads(record.read_text())
    epoch_tokens = corpus.get("epoch_useful_tokens") or corpus["packed"]["useful_tokens"]
    max_len = args.max_len or corpus.get("max_seq_length", 32768)
    budgets = _budgets(args, max_len)
    cells = corpus_cells(args, trainers, budgets)
    deadline = t_start + args.deadline_s if args.deadline_s else None
    gpu = gpu_name()
    slug = (gpu or "cpu").lower().replace(" ", "_").replace("/", "_")
    out = Path(args.out) if args.out else REPO / "bench" / "results" / f"train_gpu_corpus_{model}_{slug}.json"
    report = {"benchmark": "train_gpu_corpus", "model": model, "random_init": True, "gpu": gpu,
              "host": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cpus",
              "corpus_record": str(record.relative_to(REPO) if record.is_relative_to(REPO) else record),
              "corpus_build_manifest_sha256": corpus["build"]["manifest_sha256"],
              "epoch_useful_tokens_subset_all": epoch_tokens, "max_seq_length": max_len,
              "tokens_per_step": budgets[0] if len(budgets) == 1 else budgets,
              "peak_flops_for_mfu": H100_BF16_PEAK,
              "flops_formula": "sum over examples of len * (4N + 3*2*L*d_attn*len): each example at its own length",
              "answer_tokens_with_loss": ANSWER_TOKENS, "warmup": args.warmup, "steps": args.steps,
              "sweep": {"layouts": args.layouts, "tokens_per_step": budgets, "grad_ckpt": args.grad_ckpt,
                        "attn": args.attn, "liger": args.liger, "deadline_s": args.deadline_s},
              "versions": versions(), "results": [], "complete": False, "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    results = report["results"]
    last_wall = None
    for cell in cells:
        what = {k: cell[k] for k in ("trainer", "mode", "tokens_per_step", "attn_implementation", "liger")}
        what["gradient_checkpointing_asked"] = cell["grad_ckpt"]
        left = deadline - time.perf_counter() if deadline else None
        if left is not None and left < (last_wall or 30.0):   # it would not end before the deadline
            rec = {**what, "status": "skipped", "error": f"--deadline-s {args.deadline_s:g}: {max(left, 0):.0f} s left"}
            results.append(rec)
            print(f"[{cell['trainer']} {_variant(cell)}] skipped (deadline)", file=sys.stderr, flush=True)
            _write(out, report)
            continue
        cmd = [args.python, __file__, "--corpus-worker", cell["trainer"], cell["mode"], "--corpus", str(record),
               "--model-dir", str(model_dir), "--warmup", str(args.warmup), "--steps", str(args.steps),
               "--lora-r", str(args.lora_r), "--tokens-per-step", str(cell["tokens_per_step"] or budgets[0]),
               "--max-len", str(max_len), "--grad-ckpt", cell["grad_ckpt"]]
        if cell["attn_implementation"]:
            cmd += ["--attn", cell["attn_implementation"], "--liger", cell["liger"]]
        print(f"[{cell['trainer']} {_variant(cell)}] ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        rec = _run_cell(cmd, what, int(min(args.timeout, left)) if left is not None else args.timeout)
        last_wall = time.perf_counter() - t
        rec["cell_wall_s"] = round(last_wall, 1)
        if rec["status"] == "ok":
            rec["epoch_hours_subset_all"] = epoch_tokens / rec["useful_tokens_per_s"] / 3600
        results.append(rec)
        _speedups(results)
        _write(out, report)
        print(f"[{cell['trainer']} {_variant(cell)}] {_corpus_line(rec)}", file=sys.stderr)
    report["complete"] = True
    _write(out, report)
    print(f"wrote {out}", file=sys.stderr)
    print(f"{'trainer':8} {'mode':9} {'tokens':>7} {'gc':>4} {'attn':>17} {'liger':>5} {'tok/s':>9} {'MFU':>6} "
          f"{'peak GiB':>9} {'epoch h':>8} {'speed-up':>8}")
    for r in results:
        head = (f"{r['trainer']:8} {r['mode']:9} {r.get('tokens_per_step') or '-':>7} "
                f"{_gc(r):>4} {r.get('attn_implementation') or '-':>17} {r.get('liger') or '-':>5} ")
        print(head + (_corpus_line(r, table=True) if r["status"] == "ok" else r["status"]))
    return 0 if all(r["status"] in ("ok", "oom", "skipped") for r in results) else 1


def _gc(r: dict) -> str:
    if r.get("status") == "ok":
        return "on" if r["gradient_checkpointing"] else "off"
    return str(r.get("gradient_checkpointing_asked", "-"))


def _speedups(results: list[dict]) -> None:
    """Each packed cell's useful tokens/s over its trainer's unpacked cell with the same kernels, when measured."""
    key = lambda r: (r["trainer"], r.get("gradient_checkpointing_asked"), r.get("attn_implementation"),  # noqa: E731
                     r.get("liger"))
    unpacked = {key(r): r for r in results if r["mode"] == "unpacked" and r["status"] == "ok"}
    for r in results:
        if r["mode"] == "packed" and r["status"] == "ok" and key(r) in unpacked:
            r["speedup_over_unpacked"] = r["useful_tokens_per_s"] / unpacked[key(r)]["useful_tokens_per_s"]


def _write(out: Path, report: dict) -> None:
    """The record, whole, after every cell (a stopped sweep keeps what it measured)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out)


def _corpus_line(r: dict, table: bool = False) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {r.get('error', '')[-500:]}"
    mem, mfu = r.get("peak_mem_allocated_gib"), r.get("mfu")
    if table:
        sp = r.get("speedup_over_unpacked")
        return (f"{r['useful_tokens_per_s']:>9.0f} {'-' if mfu is None else f'{100 * mfu:.1f}%':>6} "
                f"{'-' if mem is None else f'{mem:.1f}':>9} {r.get('epoch_hours_subset_all', 0):>8.2f} "
                f"{'' if sp is None else f'{sp:.2f}x':>8}")
    return (f"{r['useful_tokens_per_s']:.0f} useful tok/s, step {r['step_time_s_mean']:.3f} s, "
            f"peak mem {'-' if mem is None else f'{mem:.1f} GiB'}, MFU {'-' if mfu is None else f'{100 * mfu:.1f}%'}")


def _run_cell(cmd: list[str], what: dict, timeout: int) -> dict:
    """One cell in a fresh process; its BENCH_RESULT line, or what went wrong."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        lines = [x for x in p.stdout.splitlines() if x.startswith("BENCH_RESULT ")]
        if p.returncode == 0 and lines:
            return json.loads(lines[-1][len("BENCH_RESULT "):])
        err = p.stderr.strip().splitlines()
        oom = "out of memory" in p.stderr.lower()
        return {**what, "status": "oom" if oom else "error", "error": "\n".join(err[-15:])}
    except subprocess.TimeoutExpired:
        return {**what, "status": "timeout", "error": f">{timeout} s"}


# ---------------------------------------------------------------------------------------------

def versions() -> dict:
    from automon.versions import code_version, library_versions

    return {"code_version": code_version(), **library_versions()}


def _budget_list(text: str) -> list[int]:
    """16k,32k -> [16384, 32768], each checked as train.tokens_per_step is."""
    try:
        return [token_budget(x) for x in text.split(",") if x.strip()] or [token_budget("")]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace("train.tokens_per_step=", "--tokens-per-step ")) from None


def _choices(flag: str, valid) -> "callable":
    def parse(text: str) -> list[str]:
        values = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in values if x not in valid]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"--{flag}: {', '.join(bad) or 'nothing'} is not one of "
                                             f"{', '.join(valid)} (a comma-separated list)")
        return list(dict.fromkeys(values))
    return parse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainers", default="unsloth,peft")
    ap.add_argument("--lengths", default="4096,16384,32768")
    ap.add_argument("--model", default="qwen3_4b", choices=[k for k in ARCH if k != "tiny"])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lora-r", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=1, help="samples per step (train.batch_size; default 1)")
    ap.add_argument("--no-grad-ckpt", action="store_true", help="disable gradient checkpointing")
    ap.add_argument("--model-dir", default=None, help="where the random model is cached "
                    "(default $AUTOMON_CACHE/bench/<model>-random)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/train_gpu_<model>_<gpu>.json)")
    ap.add_argument("--tiny", action="store_true", help="tiny architecture (plumbing check)")
    ap.add_argument("--allow-cpu", action="store_true", help="with --tiny: run on CPU (numbers meaningless)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    ap.add_argument("--corpus", nargs="?", const=str(DEFAULT_CORPUS), default=None, metavar="RECORD",
                    help="train on the corpus's lengths (bench/bench_train.py's record), packed vs unpacked")
    ap.add_argument("--tokens-per-step", type=_budget_list, default=None, metavar="LIST",
                    help="--corpus: pack budgets, e.g. 16k,32k,64k,128k (train.tokens_per_step; default: the "
                         "record's max_seq_length)")
    ap.add_argument("--grad-ckpt", type=_choices("grad-ckpt", GRAD_CKPT), default=None, metavar="LIST",
                    help="--corpus: gradient checkpointing, any of on,off,auto (trainer.gradient_checkpointing; "
                         "default on, off with --no-grad-ckpt)")
    ap.add_argument("--attn", type=_choices("attn", ATTN_IMPLEMENTATIONS), default=["sdpa"], metavar="LIST",
                    help=f"--corpus, peft cells: attention, any of {','.join(ATTN_IMPLEMENTATIONS)} "
                         "(trainer.attn_implementation; default sdpa)")
    ap.add_argument("--liger", type=_choices("liger", ("off", "on")), default=["off"], metavar="LIST",
                    help="--corpus, peft cells: Liger kernels, any of off,on (trainer.liger; default off)")
    ap.add_argument("--layouts", type=_choices("layouts", ("packed", "unpacked")), default=["packed", "unpacked"],
                    metavar="LIST", help="--corpus: packed, unpacked or both (default both)")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="--corpus: start no cell that would end more than this many seconds after the start")
    ap.add_argument("--check-args", action="store_true",
                    help="check the arguments, print the cells (--corpus) and exit 0: no torch, no GPU, nothing written")
    ap.add_argument("--max-len", type=int, default=None, help="--corpus: max_seq_length (default: the record's)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter each cell runs in, a fresh process per cell (default: this one)")
    ap.add_argument("--worker", nargs=2, metavar=("TRAINER", "SEQ_LEN"), help=argparse.SUPPRESS)
    ap.add_argument("--corpus-worker", nargs=2, metavar=("TRAINER", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    t_start = time.perf_counter()
    if args.grad_ckpt is None:
        args.grad_ckpt = ["off" if args.no_grad_ckpt else "on"]
    if not args.corpus and len(args.grad_ckpt) > 1:
        ap.error("--grad-ckpt: the fixed-length mode takes one value (lists are --corpus sweeps)")
    if args.corpus_worker and (len(args.grad_ckpt) > 1 or len(args.tokens_per_step or []) > 1
                               or len(args.attn) > 1 or len(args.liger) > 1):
        ap.error("--corpus-worker runs one cell: one value each")
    if args.check_args:
        trainers = [t for t in args.trainers.split(",") if t]
        bad = [t for t in trainers if t not in ("unsloth", "peft")]
        if bad:
            ap.error(f"--trainers: unknown {', '.join(bad)} (unsloth, peft)")
        if args.corpus:
            if not Path(args.corpus).is_file():
                ap.error(f"--corpus: {args.corpus} is missing: run python bench/bench_train.py first")
            max_len = args.max_len or json.loads(Path(args.corpus).read_text()).get("max_seq_length", 32768)
            for c in corpus_cells(args, trainers, _budgets(args, max_len)):
                print(json.dumps(c))
        print(f"bench_train_gpu: arguments ok ({'--corpus' if args.corpus else 'fixed lengths'}); nothing run",
              file=sys.stderr)
        return 0
    if args.corpus and not args.corpus_worker and not Path(args.corpus).exists():
        # before torch and the random model (minutes for a 4B one on a GPU node)
        print(f"bench_train_gpu --corpus: {args.corpus} is missing: run python bench/bench_train.py first (it "
              "records the local build's length histogram)", file=sys.stderr)
        return 2

    import torch

    if args.corpus_worker:
        rec = corpus_worker(args.corpus_worker[0], args.corpus_worker[1] == "packed", args.model_dir, args.warmup,
                            args.steps, args.lora_r, GRAD_CKPT[args.grad_ckpt[0]], args.corpus,
                            (args.tokens_per_step or [None])[0], args.max_len, attn=args.attn[0],
                            liger=args.liger[0] == "on")
        print("BENCH_RESULT " + json.dumps(rec), flush=True)
        return 0
    if args.worker:
        rec = worker(args.worker[0], int(args.worker[1]), args.model_dir, args.warmup, args.steps, args.lora_r,
                     GRAD_CKPT[args.grad_ckpt[0]], args.batch_size)
        print("BENCH_RESULT " + json.dumps(rec), flush=True)
        return 0

    cuda = torch.cuda.is_available()
    if not cuda and not (args.tiny and args.allow_cpu):
        print("bench_train_gpu: skipped: no CUDA device (torch.cuda.is_available() is False, torch "
              f"{torch.__version__}). Run it on an H100 node with the gpu-train extra installed; "
              "use --tiny --allow-cpu only to check the plumbing.", file=sys.stderr)
        return 0
    model = "tiny" if args.tiny else args.model
    trainers = [t for t in args.trainers.split(",") if t]
    if not cuda:
        trainers = [t for t in trainers if t != "unsloth"] or ["peft"]
    lengths = [int(x) for x in args.lengths.split(",")] if not (args.tiny and args.lengths == "4096,16384,32768") \
        else [128, 256]
    cache = Path(os.environ.get("AUTOMON_CACHE", Path.home() / ".cache" / "automon")) / "bench"
    model_dir = Path(args.model_dir) if args.model_dir else cache / f"{model}-random"
    t = time.perf_counter()
    make_model_dir(model, model_dir)
    print(f"model {model} at {model_dir} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    if args.corpus:
        return run_corpus(args, model_dir, model, trainers, cuda, t_start)

    results = []
    for trainer in trainers:
        for L in lengths:
            cmd = [args.python, __file__, "--worker", trainer, str(L), "--model-dir", str(model_dir),
                   "--warmup", str(args.warmup), "--steps", str(args.steps), "--lora-r", str(args.lora_r),
                   "--batch-size", str(args.batch_size), "--grad-ckpt", args.grad_ckpt[0]]
            print(f"[{trainer} {L}] ...", file=sys.stderr, flush=True)
            rec = _run_cell(cmd, {"trainer": trainer, "seq_len": L}, args.timeout)
            results.append(rec)
            if rec["status"] == "ok":
                mem = rec.get("peak_mem_allocated_gib")
                mfu = rec.get("mfu")
                print(f"[{trainer} {L}] {rec['tokens_per_s']:.0f} tok/s, step {rec['step_time_s_mean']:.3f} s, "
                      f"peak mem {'-' if mem is None else f'{mem:.1f} GiB'}, "
                      f"MFU {'-' if mfu is None else f'{100 * mfu:.1f}%'}", file=sys.stderr)
            else:
                print(f"[{trainer} {L}] {rec['status']}: {rec.get('error', '')[-500:]}", file=sys.stderr)

    gpu = gpu_name()
    report = {"benchmark": "train_gpu", "model": model, "random_init": True, "gpu": gpu,
              "host": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cpus",
              "peak_flops_for_mfu": H100_BF16_PEAK,
              "flops_formula": "4N + 3*2*L*d_attn*s per token",
              "answer_tokens_with_loss": ANSWER_TOKENS, "batch_size": args.batch_size, "warmup": args.warmup,
              "steps": args.steps, "versions": versions(), "results": results,
              "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    slug = (gpu or "cpu").lower().replace(" ", "_").replace("/", "_")
    out = Path(args.out) if args.out else REPO / "bench" / "results" / f"train_gpu_{model}_{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    print(f"{'trainer':8} {'tokens':>7} {'tok/s':>9} {'step s':>8} {'peak GiB':>9} {'MFU':>6}")
    for r in results:
        if r["status"] == "ok":
            mem = r.get("peak_mem_allocated_gib")
            mfu = r.get("mfu")
            print(f"{r['trainer']:8} {r['seq_len']:>7} {r['tokens_per_s']:>9.0f} {r['step_time_s_mean']:>8.3f} "
                  f"{'-' if mem is None else f'{mem:.1f}':>9} {'-' if mfu is None else f'{100 * mfu:.1f}%':>6}")
        else:
            print(f"{r['trainer']:8} {r['seq_len']:>7} {r['status']}")
    return 0 if all(r["status"] in ("ok", "oom") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
