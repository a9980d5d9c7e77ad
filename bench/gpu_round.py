"""One prepared GPU round: every GPU check of the project in a fixed order, each step with a time budget, the
whole under a 9-minute deadline, every record under $OUT with the device's name.

Usage:
    bash scripts/gpu-wheels.sh                 # here, once: the wheels a lent machine lacks, into .whl/
    bash bench/gpu_round.sh --dry-run          # here: the steps, budgets, commands, the wheels and their size
    bash bench/gpu_round.sh --dry-run --check  # ... and every step's command parsed (no torch, no GPU)
    bash bench/gpu_round.sh                    # on the lent machine: one device call, carry [".whl"]
    bash bench/gpu_round.sh --steps gpu-tests-train --deadline-s 400   # another selection (a later call)

On the machine (no internet; torch, transformers, PEFT, accelerate, triton there) it installs the carried
wheels into <work>/site, then runs the steps below. Each step is a fresh process group with its own timeout: its
budget plus what the steps before it left unused, never eating into the budgets of the steps after it; a step
that fails or times out is recorded and the round goes on. Steps end by --deadline-s (525 s) and the round
by 540 s (9 minutes), inside a device call's 10 minutes. The training benchmarks also get the step's deadline
(`--deadline-s`), so they end their sweep and write their record themselves instead of being killed.

Written under $OUT (or --out): round.json (the plan, the device, each step: command, budget, timeout, exit
status, wall time, the files it wrote; rewritten after every step), device.json (nvidia-smi, torch's device
name and memory, library versions), one log per step, and the steps' records, each named with the device
(train_gpu_corpus_qwen3_4b_<gpu>_<trainer>_round.json, bench_eval_gpu-<gpu>-sweep3.json, gpu-tests-<gpu>.xml).

--dry-run prints the plan and the wheels (from .whl/, else from scripts/gpu-wheels.txt) with their total size,
fails (exit 1) when they pass the 64 MiB a call carries or the budgets pass the deadline, and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".whl"
WHEEL_LIST = REPO / "scripts" / "gpu-wheels.txt"
CARRY_LIMIT = 64 * 2**20           # bytes one device call carries
ROUND_LIMIT_S = 540                # 9 minutes: the round stops itself before it
STEP_DEADLINE_S = 525              # the steps end by this; the rest writes round.json and lets processes go
PY = sys.executable
BENCH_STOP_MARGIN_S = 8            # a training bench ends its sweep this long before its step's timeout

DEVICE_SNIPPET = r"""
import json, subprocess, sys
from importlib import metadata
out = {}
try:
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap",
                        "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    out["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
except Exception as e:
    out["nvidia_smi"] = f"unavailable: {e}"
import torch
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
out["cuda_available"] = torch.cuda.is_available()
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    out["device_name"] = torch.cuda.get_device_name(0)
    out["device_memory_gib"] = round(p.total_memory / 2**30, 1)
    out["device_count"] = torch.cuda.device_count()
versions = {}
for name in ("transformers", "trl", "peft", "accelerate", "triton", "unsloth", "unsloth_zoo", "liger-kernel",
             "flash-attn", "bitsandbytes", "datasets", "hydra-core", "pytest"):
    try:
        versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        versions[name] = None
out["versions"] = versions
json.dump(out, open(sys.argv[1], "w"), indent=2)
print(json.dumps(out, indent=2))
"""


@dataclass
class Step:
    name: str
    budget_s: int
    what: str
    argv: list[str]                            # {out}, {work}, {gpu}, {wheels} filled in at run time
    check: list[str] | None = None             # a parse-only form of the command (--dry-run --check)
    deadline_flag: bool = False                # pass the step's own deadline to the command (--deadline-s)
    default: bool = True                       # in the round unless --steps names others


def _bench(script: str, *args: str) -> list[str]:
    return [PY, f"bench/{script}", *args]


TRAIN_COMMON = ["--corpus", "--layouts", "packed", "--warmup", "1", "--steps", "3", "--model-dir",
                "{work}/qwen3_4b-random"]
STEPS = [
    Step("install", 30, "install the carried wheels (.whl/) into {work}/site",
         [PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade", "--target",
          "{work}/site", "{wheels}"]),
    Step("device", 15, "the device: nvidia-smi, torch's name and memory, library versions -> device.json",
         [PY, "-c", DEVICE_SNIPPET, "{out}/device.json"]),
    Step("train-unsloth", 140,
         "training on the corpus's lengths, Unsloth packed: budgets 32k / 64k / 16k with gradient checkpointing "
         "off and on (the random Qwen3-4B is made first, about 30 s)",
         _bench("bench_train_gpu.py", *TRAIN_COMMON, "--trainers", "unsloth", "--tokens-per-step", "32k,64k,16k",
                "--grad-ckpt", "off,on", "--out", "{out}/train_gpu_corpus_qwen3_4b_{gpu}_unsloth_round.json"),
         deadline_flag=True),
    Step("train-peft", 150,
         "training on the corpus's lengths, peft packed at 32k without gradient checkpointing: FlexAttention "
         "(no dense mask) and SDPA, each with Liger's kernels and without",
         _bench("bench_train_gpu.py", *TRAIN_COMMON, "--trainers", "peft", "--tokens-per-step", "32k",
                "--attn", "flex_attention,sdpa", "--liger", "on,off", "--grad-ckpt", "off",
                "--out", "{out}/train_gpu_corpus_qwen3_4b_{gpu}_peft_round.json"),
         deadline_flag=True),
    Step("eval-sweep", 100,
         "the scoring harness: the base model + 3 random adapters as a matrix, 748 synthetic samples each",
         _bench("bench_eval_gpu.py", "--scale", "0.25", "--adapters", "3", "--workdir", "{work}/eval",
                "--out", "{out}/bench_eval_gpu-{gpu}-sweep3.json")),
    Step("gpu-tests", 75, "tests marked gpu: packed examples keep to themselves through each trainer's kernels; "
         "the warm launcher on a GPU",
         [PY, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gpu", "-rA", "--junitxml", "{out}/gpu-tests-{gpu}.xml",
          "tests/training/test_packing_gpu.py", "tests/test_warm_python.py"]),
    Step("gpu-tests-train", 260, "tests marked gpu: train/sft.py with each trainer on the GPU, its adapter scored "
         "on GPU and CPU (246-274 s on an H200: over this round's budget, a call of its own)",
         [PY, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gpu", "-rA", "--junitxml",
          "{out}/gpu-tests-train-{gpu}.xml", "tests/training/test_train_gpu.py"], default=False),
]
for _s in STEPS:
    if _s.argv[1:2] == ["bench/bench_train_gpu.py"]:
        _s.check = [*_s.argv, "--deadline-s", str(_s.budget_s - BENCH_STOP_MARGIN_S), "--check-args"]
    elif _s.argv[1:2] == ["bench/bench_eval_gpu.py"]:
        _s.check = [*_s.argv, "--check-args"]
    elif _s.argv[1:3] == ["-m", "pytest"]:
        _s.check = [*_s.argv[:3], "-p", "no:cacheprovider", "--collect-only", "-q", "-m", "gpu",
                    *[a for a in _s.argv if a.startswith("tests/")]]
    elif _s.name == "device":
        _s.check = [PY, "-c", f"compile({DEVICE_SNIPPET!r}, 'device', 'exec')"]
    elif _s.name == "install":
        _s.check = [PY, "-m", "pip", "install", "--help"]
STEP_NAMES = [s.name for s in STEPS]


# ------------------------------------------------------------------------------------------- wheels

def wheels() -> tuple[list[tuple[str, int, str]], str]:
    """[(file, bytes, sha256)] of the wheels a round carries, and where the list comes from: .whl/ when it is
    there (what the call will carry), else scripts/gpu-wheels.txt (what bash scripts/gpu-wheels.sh fetched)."""
    listed = {}
    if WHEEL_LIST.is_file():
        for line in WHEEL_LIST.read_text().splitlines():
            if line.strip():
                sha, size, name = line.split()
                listed[name] = (int(size), sha)
    if WHEELS.is_dir() and any(WHEELS.glob("*.whl")):
        return [(p.name, p.stat().st_size, listed.get(p.name, (0, ""))[1]) for p in sorted(WHEELS.glob("*.whl"))], \
            ".whl/"
    return [(n, size, sha) for n, (size, sha) in sorted(listed.items())], "scripts/gpu-wheels.txt (.whl/ absent)"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


# ------------------------------------------------------------------------------------------- the plan

def select(names: str | None, install: bool = True) -> list[Step]:
    """The steps of a round in their fixed order: the default ones, or those named; install (unless the wheels
    are installed already) and device always first."""
    if not names:
        want = [s.name for s in STEPS if s.default]
    else:
        want = [n.strip() for n in names.split(",") if n.strip()]
        bad = [n for n in want if n not in STEP_NAMES]
        if bad:
            raise SystemExit(f"gpu_round: unknown step {', '.join(bad)}; steps: {', '.join(STEP_NAMES)}")
        want += ["install", "device"]   # every call starts on a bare machine
    return [s for s in STEPS if s.name in want and (install or s.name != "install")]


def fill(argv: list[str], out: Path, work: Path, gpu: str, wheel_files: list[str]) -> list[str]:
    res = []
    for a in argv:
        if a == "{wheels}":
            res += wheel_files
            continue
        res.append(a.replace("{out}", str(out)).replace("{work}", str(work)).replace("{gpu}", gpu))
    return res


def shown(argv: list[str]) -> str:
    """A command as a shell line (the device snippet shortened)."""
    parts = ["<device snippet>" if DEVICE_SNIPPET in a or repr(DEVICE_SNIPPET) in a else a for a in argv]
    return " ".join(shlex.quote(a) if a != "<device snippet>" else a for a in parts).replace(PY, "python3")


def dry_run(steps: list[Step], args) -> int:
    files, source = wheels()
    total = sum(size for _, size, _ in files)
    budget = sum(s.budget_s for s in steps)
    ok = True
    print("gpu_round: dry run: nothing is run or written")
    print(f"deadline: the steps end by {args.deadline_s:g} s, the round by {ROUND_LIMIT_S} s (9 min); "
          f"budgets sum to {budget} s")
    if budget > args.deadline_s:
        print(f"FAIL: the budgets ({budget} s) pass the steps' deadline ({args.deadline_s:g} s)")
        ok = False
    print(f"wheels: {len(files)} files, {_mib(total)} ({total:,} bytes) from {source}; a call carries at most "
          f"{_mib(CARRY_LIMIT)}")
    for name, size, _ in files:
        print(f"  {size:>10,}  {name}")
    if not files:
        print("FAIL: no wheels: run bash scripts/gpu-wheels.sh first")
        ok = False
    if total > CARRY_LIMIT:
        print(f"FAIL: the wheels ({_mib(total)}) pass the {_mib(CARRY_LIMIT)} a call carries")
        ok = False
    print("steps (in this order; a step that fails or times out is recorded and the round goes on):")
    out, work = Path("$OUT"), Path(args.work)
    for i, s in enumerate(steps, 1):
        argv = fill(s.argv, out, work, "<gpu>", ["<.whl/*.whl>"])
        if s.deadline_flag:
            argv += ["--deadline-s", f"<its timeout - {BENCH_STOP_MARGIN_S}>"]
        what = s.what.replace("{work}", str(work))
        print(f"  {i}. {s.name:<15} {s.budget_s:>4} s  {what}")
        print(f"     $ {shown(argv)}")
    rest = [s for s in STEPS if s not in steps]
    for s in rest:
        print(f"  not in this round: {s.name} ({s.budget_s} s): {s.what}; --steps {s.name} runs it")
    extra = f" --steps {args.steps}" if args.steps else ""
    print(f'device call: command "bash bench/gpu_round.sh{extra}", carry [".whl"], timeout_s 600')
    if args.check:
        for s in steps:
            if not s.check:
                continue
            argv = fill(s.check, out, work, "gpu", [])
            r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300,
                               env={**os.environ, "PYTHONPATH": _pythonpath(None)})
            print(f"check {s.name}: {'ok' if r.returncode == 0 else 'FAILED'} ($ {shown(argv)})")
            if r.returncode != 0:
                print((r.stdout + r.stderr)[-2000:])
                ok = False
    print("dry run: ok" if ok else "dry run: FAILED")
    return 0 if ok else 1


# ------------------------------------------------------------------------------------------- the round

def _pythonpath(site: Path | None) -> str:
    parts = ([str(site)] if site else []) + [str(REPO / "src")]
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(parts + ([old] if old else []))


def _slug(device: dict) -> str:
    name = device.get("device_name") or "unknown-gpu"
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()


def _run(argv: list[str], log: Path, timeout: float, env: dict) -> tuple[int | None, str]:
    """(exit status or None on a timeout, status) of one step in its own process group, output to `log`."""
    with open(log, "ab") as f:
        p = subprocess.Popen(argv, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = p.wait(timeout=max(timeout, 1))
            return rc, "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            f.write(f"\n[gpu_round] stopped after {timeout:.0f} s (its timeout)\n".encode())
            return None, "timeout"


def run_round(steps: list[Step], args) -> int:
    t0 = time.monotonic()
    out, work = Path(args.out).resolve(), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    carried = sorted(str(p) for p in WHEELS.glob("*.whl")) if WHEELS.is_dir() else []
    listed = {}
    if WHEEL_LIST.is_file():
        listed = {ln.split()[2]: ln.split()[0] for ln in WHEEL_LIST.read_text().splitlines() if ln.strip()}
    rec = {"round": "gpu_round", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "deadline_s": args.deadline_s,
           "round_limit_s": ROUND_LIMIT_S, "repo": str(REPO), "work": str(work), "device": None,
           "wheels": {"files": len(carried), "bytes": sum(Path(c).stat().st_size for c in carried),
                      "list": "scripts/gpu-wheels.txt"},
           "plan": [{"name": s.name, "budget_s": s.budget_s} for s in steps], "steps": []}
    import hashlib   # the carried wheels against scripts/gpu-wheels.txt (another fetch: say so, go on)

    rec["wheels"]["not_as_listed"] = [Path(c).name for c in carried if listed.get(Path(c).name) !=
                                      hashlib.sha256(Path(c).read_bytes()).hexdigest()]

    def save() -> None:
        rec["elapsed_s"] = round(time.monotonic() - t0, 1)
        tmp = out / "round.json.tmp"
        tmp.write_text(json.dumps(rec, indent=2) + "\n")
        os.replace(tmp, out / "round.json")

    env = {**os.environ, "PYTHONPATH": _pythonpath(work / "site"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "UNSLOTH_DISABLE_STATISTICS": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
           "AUTOMON_CACHE": str(work / "cache"), "PYTHONUNBUFFERED": "1"}
    gpu = "unknown-gpu"
    save()
    for i, s in enumerate(steps, 1):
        later = sum(x.budget_s for x in steps[i:])
        timeout = args.deadline_s - (time.monotonic() - t0) - later
        entry = {"name": s.name, "budget_s": s.budget_s, "what": s.what.replace("{work}", str(work))}
        rec["steps"].append(entry)
        if timeout < min(10, s.budget_s):
            entry.update(status="skipped", reason=f"{timeout:.0f} s left before the later steps' budgets")
            save()
            continue
        if s.name == "install" and not carried:
            entry.update(status="failed", reason="no .whl/*.whl carried: run bash scripts/gpu-wheels.sh here and "
                                                 "name .whl in the call's carry")
            save()
            continue
        if s.name == "eval-sweep":   # the training benchmarks' random Qwen3-4B, not a second 8 GB one
            model, link = work / "qwen3_4b-random", work / "eval" / "qwen3_4b_random"
            if (model / "bench_model.json").is_file() and not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(model)
        argv = fill(s.argv, out, work, gpu, carried)
        if s.deadline_flag:
            argv += ["--deadline-s", str(int(timeout - BENCH_STOP_MARGIN_S))]
        log = out / f"{i:02d}-{s.name}.log"
        device = (rec["device"] or {}).get("device_name") or ("no CUDA device" if rec["device"] else "device not read yet")
        log.write_text(f"# {device} | step {s.name} | timeout {timeout:.0f} s\n$ {shown(argv)}\n")
        before = {p.name for p in out.iterdir()}
        entry.update(command=shown(argv), timeout_s=round(timeout), log=log.name, status="running")
        save()
        t = time.monotonic()
        rc, status = _run(argv, log, timeout, env)
        entry.update(rc=rc, status=status, wall_s=round(time.monotonic() - t, 1),
                     wrote=sorted({p.name for p in out.iterdir()} - before - {log.name, "round.json.tmp"}))
        if s.name == "device" and (out / "device.json").is_file():
            rec["device"] = json.loads((out / "device.json").read_text())
            gpu = _slug(rec["device"])
        print(f"[gpu_round] {s.name}: {status} in {entry['wall_s']} s (timeout {timeout:.0f} s)", flush=True)
        save()
    rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save()
    print(f"[gpu_round] done in {time.monotonic() - t0:.0f} s; records under {out}: "
          f"{', '.join(sorted(p.name for p in out.iterdir()))}", flush=True)
    return 0 if all(x["status"] == "ok" for x in rec["steps"]) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=f"steps: {', '.join(f'{s.name} ({s.budget_s} s)' for s in STEPS)}")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the wheels; run and write nothing")
    ap.add_argument("--check", action="store_true", help="with --dry-run: parse every step's command (light)")
    ap.add_argument("--steps", default=None, help="comma-separated steps (default: every step marked for the round; "
                                                  "install and device always come first)")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="where the records go (default $OUT)")
    ap.add_argument("--work", default="/tmp/gpu_round", help="models, installed wheels, caches (default /tmp/gpu_round)")
    ap.add_argument("--deadline-s", type=float, default=STEP_DEADLINE_S,
                    help=f"the steps end by this many seconds after the start (default {STEP_DEADLINE_S}; at most "
                         f"{ROUND_LIMIT_S - 10})")
    ap.add_argument("--no-install", action="store_true",
                    help="the wheels are installed in <work>/site already (a warm machine's second call)")
    args = ap.parse_args()
    if not 0 < args.deadline_s <= ROUND_LIMIT_S - 10:
        ap.error(f"--deadline-s must be in (0, {ROUND_LIMIT_S - 10}]: the round stops before {ROUND_LIMIT_S} s")
    steps = select(args.steps, install=not args.no_install)
    if args.dry_run:
        return dry_run(steps, args)
    if not args.out:
        ap.error("--out (or $OUT) is needed: where the records go")
    return run_round(steps, args)


if __name__ == "__main__":
    sys.exit(main())
