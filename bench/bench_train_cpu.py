"""CPU training time of the command a newcomer tries first, and the CPU pack budgets its default was chosen from.

Usage:
    python bench/bench_train_cpu.py                                  # the command, once
    python bench/bench_train_cpu.py --sweep 1024,2048,4096,8192,32768 --steps 6   # budgets, a few steps each

The command is `python train/sft.py subset=safety_qa model=tiny train.max_steps=30` on the local build
(data/builds/default), as a newcomer types it, run in a fresh process with only output_dir= added (a temporary
directory: the default one would be found complete on a second run). Measured: wall time, the training
process's peak RSS and CPU time (os.wait4), useful tokens/s (the trainer's non-padding tokens over its runtime,
and over the wall time), what a step held (run.json's packing record), the load average before and after (the
2 cores are shared: other work on the machine slows a run) and the machine.

--sweep runs the same command with train.tokens_per_step=<budget>, --steps steps and a log line per step, one
budget after another, and records per budget the steady tokens/s (the median of the logged steps after the
first), the start-up (wall minus the trainer's runtime), the peak RSS and the projected wall time of 30 steps.
Writes bench/results/train_cpu_<what>-<UTC date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMAND = ["train/sft.py", "subset=safety_qa", "model=tiny", "train.max_steps=30"]


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_once(extra: list[str], out_dir: Path) -> dict:
    """One train/sft.py run in a fresh process: wall, peak RSS, CPU time, and what its run dir says."""
    argv = [sys.executable, *COMMAND, *extra, f"output_dir={out_dir}"]
    load_before = os.getloadavg()
    t = time.perf_counter()
    p = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    output = p.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    rc = os.waitstatus_to_exitcode(status)
    rec = {"command": " ".join(["python", *COMMAND, *extra]), "rc": rc, "wall_s": round(wall, 1),
           "peak_rss_gib": round(usage.ru_maxrss / 2**20, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
           "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]}
    if rc != 0:
        rec["error"] = output[-3000:]
        return rec
    metrics = json.loads((out_dir / "train_metrics.json").read_text())
    info = json.loads((out_dir / "run.json").read_text())
    runtime = metrics["train_runtime_s_last_segment"]
    rec.update(steps=metrics["steps"], epochs=round(metrics["epochs"], 3), tokens_seen=metrics["tokens_seen"],
               train_runtime_s=round(runtime, 1), tokens_per_s=round(metrics["tokens_seen"] / runtime, 1),
               tokens_per_s_over_wall=round(metrics["tokens_seen"] / wall, 1),
               startup_s=round(wall - runtime, 1), packing=info.get("packing"), kernels=info.get("kernels"),
               loss_first=metrics["loss_first"], loss_last=metrics["loss_last"])
    log = (out_dir / "train.log").read_text()
    rec["log_step_lines"] = [ln.split(": ", 1)[1] for ln in log.splitlines()
                             if "an optimizer step holds" in ln or "packs of up to" in ln]
    per_step = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]
    steady = [m["tokens_per_s"] for m in per_step[1:] if m.get("tokens_per_s")]
    if steady:
        rec["steady_tokens_per_s"] = round(statistics.median(steady), 1)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", default=None, help="comma-separated pack budgets (train.tokens_per_step)")
    ap.add_argument("--steps", type=int, default=6, help="--sweep: optimizer steps per budget (default 6)")
    ap.add_argument("--project-steps", type=int, default=30, help="--sweep: project the wall time of this many steps")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from automon.versions import code_version, library_versions

    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_train_cpu_") as tmp:
        if args.sweep:
            for i, budget in enumerate(int(x) for x in args.sweep.split(",") if x.strip()):
                rec = run_once([f"train.tokens_per_step={budget}", f"train.max_steps={args.steps}",
                                "train.logging_steps=1"], Path(tmp) / f"run{i}")
                rec["tokens_per_step"] = budget
                if rec["rc"] == 0 and rec.get("steady_tokens_per_s"):
                    per_step = rec["tokens_seen"] / rec["steps"]
                    rec["projected_wall_s"] = round(rec["startup_s"] + args.project_steps * per_step /
                                                    rec["steady_tokens_per_s"], 1)
                runs.append(rec)
                print(json.dumps({k: rec.get(k) for k in ("tokens_per_step", "wall_s", "steady_tokens_per_s",
                                                          "peak_rss_gib", "projected_wall_s", "rc")}), flush=True)
        else:
            rec = run_once([], Path(tmp) / "run")
            runs.append(rec)
            print(json.dumps({k: v for k, v in rec.items() if k != "error"}, indent=2), flush=True)
    report = {"benchmark": "train_cpu_sweep" if args.sweep else "train_cpu_default",
              "command": "python " + " ".join(COMMAND), "data_dir": "data/builds/default",
              "machine": f"{_cpu()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
              "python": platform.python_version(), "when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "versions": {"code_version": code_version(), **library_versions()}, "runs": runs}
    if args.sweep:
        report.update(steps_per_budget=args.steps, projected_steps=args.project_steps)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    out = Path(args.out) if args.out else REPO / "bench" / "results" / \
        f"train_cpu_{'budgets' if args.sweep else 'default'}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
