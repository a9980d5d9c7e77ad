"""Benchmark: what constraining evidence answers costs on the hf backend (automon.backends.constrained).

Usage:
    python bench/bench_constrained.py                                   # SmolLM2-135M-Instruct, 8 prompts
    python bench/bench_constrained.py --model tiny --samples 4 --repeats 3

Scores `--samples` evidence_v1 prompts of the synthetic test samples (tests/support.py) with
backend=hf on the CPU, `--repeats` times (a first call, not counted, builds llguidance's tokenizer
and warms up). Per repeat: wall seconds per sample, the seconds spent inside the format guide (mask
computation and application, FormatGuide.__call__) per sample and per generated step, its share of
the wall time, the same in CPU seconds of the process (what the guide computes, without the waits
for a core of a loaded machine), and how many answers parse. Prints medians and writes
bench/results/constrained-<model>.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2_135m_instruct", help="a built-in model: smollm2_135m_instruct | tiny")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)

    import torch

    from support import synthetic_split
    from automon.backends import constrained
    from automon.backends.base import JudgeRequest
    from automon.backends.hf import HFConfig, HFJudge
    from automon.config.common import ModelConfig
    from automon.models.loading import load_tokenizer
    from automon.prompts import monitor_messages, parse_answer, prompt_text

    guide_s = [0.0, 0.0]  # wall, CPU (on a loaded machine the wall time also counts waiting for a core)
    steps = [0]
    inner = constrained.FormatGuide.__call__

    def timed(self, input_ids, scores):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return inner(self, input_ids, scores)
        finally:
            guide_s[0] += time.perf_counter() - t0
            guide_s[1] += time.process_time() - c0
            steps[0] += 1

    constrained.FormatGuide.__call__ = timed  # type: ignore[method-assign]

    model = ModelConfig(name=a.model, pretrained=a.model, dtype="float32")
    tok = load_tokenizer(model)
    _, test = synthetic_split(pairs_per_subset=max(1, (a.samples + 11) // 12))
    reqs = [JudgeRequest(str(i), [], prompt=prompt_text(tok, monitor_messages(s, "evidence_v1")))
            for i, s in enumerate(test[:a.samples])]
    t0 = time.perf_counter()
    judge = HFJudge(model, HFConfig(device="cpu", max_new_tokens=a.max_new_tokens, batch_size=a.batch_size),
                    "evidence", [], tok)
    startup_s = time.perf_counter() - t0
    judge.score(reqs[:1])  # warm-up
    runs = []
    for _ in range(a.repeats):
        guide_s[0], guide_s[1], steps[0] = 0.0, 0.0, 0
        t0, c0 = time.perf_counter(), time.process_time()
        out = judge.score(reqs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        n_tokens = sum(len(tok.encode(r.text or "", add_special_tokens=False)) for r in out)
        runs.append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "guide_s": round(guide_s[0], 4),
                     "guide_cpu_s": round(guide_s[1], 4), "steps": steps[0],
                     "answer_tokens": n_tokens,
                     "parsed": sum(parse_answer(r.text, "evidence_v1").pred is not None for r in out)})
    med = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "guide_s", "guide_cpu_s", "steps")}
    n = len(reqs)
    summary = {
        "samples": n, "startup_s": round(startup_s, 2),
        "wall_s_per_sample": round(med["wall_s"] / n, 3),
        "guide_s_per_sample": round(med["guide_s"] / n, 4),
        "guide_ms_per_step": round(1e3 * med["guide_s"] / max(1, med["steps"]), 3),
        "guide_share": round(med["guide_s"] / med["wall_s"], 4),
        "cpu_s_per_sample": round(med["cpu_s"] / n, 3),
        "guide_cpu_s_per_sample": round(med["guide_cpu_s"] / n, 4),
        "guide_cpu_ms_per_step": round(1e3 * med["guide_cpu_s"] / max(1, med["steps"]), 3),
        "guide_cpu_share": round(med["guide_cpu_s"] / med["cpu_s"], 4),
        "parsed": f"{min(r['parsed'] for r in runs)}/{n}",
    }
    record = {
        "command": "python bench/bench_constrained.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"host": platform.node(), "machine": platform.machine(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "load_avg": list(os.getloadavg()),
                    "python": sys.executable},
        "model": a.model, "max_new_tokens": a.max_new_tokens, "batch_size": a.batch_size,
        "decoding": constrained.decoding_identity(), "runs": runs, "median": summary,
    }
    for k, v in summary.items():
        print(f"{k}: {v}")
    out = a.out or REPO / "bench" / "results" / f"constrained-{a.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
