"""Benchmark the data build: time per stage at 1x and 4x the training sources.

Usage:
    python bench/bench_build.py                          # real data (../shared/data/raw), scales 1 and 4
    python bench/bench_build.py --scales 1 --repeats 3   # median of 3 full builds
    python bench/bench_build.py --synthetic              # the synthetic source tree (no real data needed)
    python bench/bench_build.py --scales 1 --set test.sg_code=50   # build config overrides, as on the command line

`scale=k` clones every training item k times under distinct keys and ids after the recipes ran,
so every stage after them (split, materialise, disjointness, writing, post-write verification)
sees k times the training samples. Recipes (including sg_code's sandbox runs) run once and are
reported separately. Prints a table and writes bench/results/build.json.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="1,4")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a build config override (repeatable), e.g. test.sg_code=50")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "build.json"))
    args = ap.parse_args()

    from support import RAW, build_cfg
    from automon.data.build import run_build
    from automon.sources.synthetic import write_synthetic_root
    from automon.subsets import names

    with tempfile.TemporaryDirectory() as tmp:
        if args.synthetic or not RAW.is_dir():
            root, extra = write_synthetic_root(Path(tmp) / "raw", n=200), [f"test.{s}=20" for s in names()]
        else:
            root, extra = RAW, []
        results = []
        for scale in [int(s) for s in args.scales.split(",")]:
            runs = []
            for r in range(args.repeats):
                out = Path(tmp) / f"b{scale}_{r}"
                t0 = time.perf_counter()
                manifest = run_build(build_cfg([f"sources.root={root}", f"out={out}", f"scale={scale}", *extra, *args.set]))
                wall = time.perf_counter() - t0
                log = json.loads((out / "build_log.json").read_text())
                runs.append({"wall_s": wall, "stages_s": log["timings_s"], "n_train": log["n_train"],
                             "n_test": log["n_test"]})
                del manifest
            med = statistics.median(r["wall_s"] for r in runs)
            stages = {k: statistics.median(r["stages_s"].get(k, 0.0) for r in runs) for k in runs[0]["stages_s"]}
            results.append({"scale": scale, "median_wall_s": round(med, 2), "repeats": args.repeats,
                            "walls_s": [round(r["wall_s"], 2) for r in runs], "overrides": args.set,
                            "n_train": runs[0]["n_train"], "n_test": runs[0]["n_test"],
                            "median_stages_s": {k: round(v, 2) for k, v in stages.items()}})
            print(f"\nscale {scale}x: {runs[0]['n_train']:,} train / {runs[0]['n_test']:,} test samples, "
                  f"median wall {med:.1f} s over {args.repeats} run(s)")
            for k, v in stages.items():
                print(f"  {k:26s} {v:7.2f} s")
    if len(results) >= 2:
        a, b = results[0], results[-1]
        after = [k for k in a["median_stages_s"] if not k.startswith("recipe:") and k != "total"]
        ta = sum(a["median_stages_s"][k] for k in after)
        tb = sum(b["median_stages_s"].get(k, 0) for k in after)
        ratio_n = b["n_train"] / a["n_train"]
        print(f"\npost-recipe stages: {ta:.1f} s -> {tb:.1f} s ({tb / ta:.2f}x time for {ratio_n:.2f}x training samples)")
    record = {"machine": machine(), "source_root": str(root) if not args.synthetic else "synthetic",
              "command": "python bench/bench_build.py " + " ".join(sys.argv[1:]), "results": results,
              "code_version": __import__("automon.versions", fromlist=["code_version"]).code_version()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nmachine: {record['machine']}\nwrote {args.out}")


if __name__ == "__main__":
    main()
