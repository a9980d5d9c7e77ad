"""The three stages as the pipeline sees them: their command lines, and whether their outputs are
complete and current. Everything here goes through the stages' CLIs (`--cfg job --resolve` gives
the exact config a stage would run with) and the files they write; nothing imports their code.

Current means:
  build  manifest.json present; every output file's sha256 equals the manifest's; the manifest's
         recorded config equals the config build.py would resolve now; local source files unchanged.
  train  <run>/config.yaml equals the config sft.py would resolve now; run.json says complete and was
         trained on this build (manifest sha256); the adapter is there.
  eval   metrics.json, matrix, report and plots present; config.yaml equals the config holdout.py
         would resolve now; metrics.json scored this build (manifest sha256) and exactly the adapters
         now in the runs dir, whose content hashes equal the ones recorded when it ran.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from automon.config.pipeline import PipelineConfig
from automon.pipeline.state import State, config_diff

EVAL_OUTPUTS = ("metrics.json", "matrix.csv", "matrix.md", "report.md", "heatmap.png", "pareto.png")
BASE = "base"


class PipelineError(RuntimeError):
    """Something the user must fix; the message says what."""


@dataclass
class Check:
    current: bool
    reason: str
    overwrite: bool = False          # the existing output is not this config's: replace, don't resume
    info: dict[str, Any] = field(default_factory=dict)


def _diff_reason(what: str, diff: list[str]) -> str:
    more = f" (+{len(diff) - 4} more)" if len(diff) > 4 else ""
    return f"{what} changed: " + "; ".join(diff[:4]) + more


def resolved_config(cmd: list[str], env: dict[str, str], capture: Callable[..., str]) -> dict:
    """The config a stage would run with: its own `--cfg job --resolve`."""
    try:
        out = capture(cmd + ["--cfg", "job", "--resolve"], env)
    except subprocess.CalledProcessError as e:
        raise PipelineError(f"the stage rejected its configuration:\n  {' '.join(cmd)}\n"
                            f"{(e.stderr or '').strip()[-2000:]}") from None
    return yaml.safe_load(out) or {}


# ---------------------------------------------------------------- build

def build_cmd(c: PipelineConfig, py: str, repo: Path, sources_root: str | None) -> list[str]:
    cmd = [py, str(repo / "data_build" / "build.py"), f"out={c.build.out}",
           f"sources.root={sources_root if sources_root is not None else 'null'}"]
    cmd += [f"test.{k}={v}" for k, v in c.build.test.items()]
    return cmd + list(c.build.args) + list(c.build.extra_args)


def check_build(out: Path, want: dict, state: State) -> Check:
    mf = out / "manifest.json"
    if not mf.exists():
        return Check(False, f"no build at {out} yet")
    try:
        m = json.loads(mf.read_text())
    except ValueError:
        return Check(False, f"{mf} is not valid JSON", overwrite=True)
    files = m.get("files") or {}
    if not files:
        return Check(False, f"{mf} lists no output files", overwrite=True)
    for name, sha in files.items():
        p = out / name
        if not p.exists():
            return Check(False, f"{p} is missing", overwrite=True)
        if state.sha256(p) != sha:
            return Check(False, f"{p} does not match its sha256 in manifest.json", overwrite=True)
    want = {k: v for k, v in want.items() if k not in ("out", "overwrite")}
    diff = config_diff(m.get("config", {}), want)
    if diff:
        return Check(False, _diff_reason("build config", diff), overwrite=True)
    for name, src in (m.get("sources") or {}).items():
        if src.get("kind") != "local":
            continue
        root = Path(src.get("root", ""))
        for rel, sha in (src.get("files") or {}).items():
            p = root / rel
            if not p.exists() or state.sha256(p) != sha:
                return Check(False, f"source {name} changed: {p}", overwrite=True)
    return Check(True, f"manifest and {len(files)} files match (sha256), config unchanged",
                 info={"manifest_sha256": state.sha256(mf)})


# ---------------------------------------------------------------- train

def entry_dirname(entry: str) -> str:
    """Run directory name for a subsets entry: `safety_qa`, `all`, `[a,b]` -> `a+b`."""
    e = entry.strip()
    if e.startswith("[") and e.endswith("]"):
        return "+".join(x.strip() for x in e[1:-1].split(",") if x.strip())
    return e


def train_cmd(c: PipelineConfig, py: str, repo: Path, entry: str) -> list[str]:
    return [py, str(repo / "train" / "sft.py"), f"subset={entry}", f"model={c.monitor.model}", f"prompt={c.monitor.prompt}",
            f"data.dir={c.build.out}", f"output_dir={Path(c.train.runs_dir) / entry_dirname(entry)}",
            *c.train.args, *c.train.extra_args]


def train_multirun_cmd(c: PipelineConfig, py: str, repo: Path, entries: list[str], overwrite: bool) -> list[str]:
    """One Hydra multirun through c.train.launcher; each job writes runs_dir/<subset>."""
    bad = [e for e in entries if entry_dirname(e) != e]
    if bad:
        raise PipelineError(f"train.launcher runs one job per subset name; {bad} are lists: give them "
                            "their own conf/subset/<name>.yaml, or leave train.launcher=null")
    cmd = [py, str(repo / "train" / "sft.py"), "-m", f"subset={','.join(entries)}",
           f"hydra/launcher={c.train.launcher}", f"hydra.sweep.dir={c.train.runs_dir}",
           "hydra.sweep.subdir=.jobs/${hydra.job.num}",
           "output_dir=${hydra:sweep.dir}/${hydra:runtime.choices.subset}",
           f"model={c.monitor.model}", f"prompt={c.monitor.prompt}", f"data.dir={c.build.out}",
           *c.train.args, *c.train.extra_args, *c.train.launcher_args]
    return cmd + (["overwrite=true"] if overwrite else [])


def check_run(run_dir: Path, want: dict, manifest_sha: str | None) -> Check:
    cfg_file, run_file = run_dir / "config.yaml", run_dir / "run.json"
    if not run_dir.exists():
        return Check(False, "not trained yet")
    if not cfg_file.exists():
        nonempty = any(p.name not in {"train.log", ".lock"} for p in run_dir.iterdir())
        return Check(False, f"{run_dir} holds no run config", overwrite=nonempty)
    have = yaml.safe_load(cfg_file.read_text()) or {}
    diff = config_diff(have, want)
    if diff:
        return Check(False, _diff_reason("training config", diff), overwrite=True)
    info = json.loads(run_file.read_text()) if run_file.exists() else {}
    if manifest_sha is not None and info.get("data_manifest_hash") not in (None, manifest_sha):
        return Check(False, "the data build changed since this run was trained", overwrite=True)
    adapter = run_dir / "adapter"
    if info.get("status") != "complete" or not (adapter / "adapter_config.json").exists():
        return Check(False, f"incomplete (status {info.get('status', 'unknown')}): resumes from its last checkpoint")
    if manifest_sha is None:
        return Check(False, "the build it was trained on is about to be rebuilt")
    return Check(True, f"complete, {info.get('steps', '?')} steps, same config and build")


def run_adapters(runs_dir: Path) -> dict[str, Path]:
    """Run name -> adapter dir, for every subdirectory of runs_dir that holds a finished adapter
    (what eval/holdout.py sweep_dir= scores)."""
    if not runs_dir.is_dir():
        return {}
    return {p.name: p / "adapter" for p in sorted(runs_dir.iterdir())
            if p.is_dir() and (p / "adapter" / "adapter_config.json").exists()}


# ---------------------------------------------------------------- eval

def eval_cmd(c: PipelineConfig, py: str, repo: Path) -> list[str]:
    return [py, str(repo / "eval" / "holdout.py"), f"sweep_dir={c.train.runs_dir}", f"model={c.monitor.model}",
            f"prompt={c.monitor.prompt}", f"backend={c.eval.backend}", f"data.dir={c.build.out}",
            f"output_dir={c.eval.out}", *c.eval.args, *c.eval.extra_args]


def check_eval(out: Path, want: dict, manifest_sha: str | None, adapters: dict[str, str], recorded: dict,
               state: State) -> Check:
    missing = [n for n in EVAL_OUTPUTS if not (out / n).exists()]
    if missing:
        return Check(False, f"no complete evaluation at {out} yet (missing {', '.join(missing)})")
    if not (out / "config.yaml").exists():
        return Check(False, f"{out}/config.yaml is missing")
    have = yaml.safe_load((out / "config.yaml").read_text()) or {}
    diff = config_diff(have, want)
    if diff:
        return Check(False, _diff_reason("evaluation config", diff))
    try:
        m = json.loads((out / "metrics.json").read_text())
    except ValueError:
        return Check(False, "metrics.json is not valid JSON")
    if manifest_sha is None or (m.get("data") or {}).get("manifest_hash") != manifest_sha:
        return Check(False, "scored a different data build")
    scored = set((m.get("monitors") or {}).keys())
    now = set(adapters) | {BASE}
    if scored != now:
        return Check(False, f"scored monitors {sorted(scored)}, the runs dir now has {sorted(now)}")
    if recorded.get("adapters") != adapters:
        changed = sorted(k for k in adapters if (recorded.get("adapters") or {}).get(k) != adapters[k])
        return Check(False, "adapters changed since the evaluation: " + (", ".join(changed) or "no record"))
    if recorded.get("metrics_sha256") != state.sha256(out / "metrics.json"):
        return Check(False, "metrics.json changed since the pipeline recorded it")
    return Check(True, f"{len(now)} monitors scored on this build with these adapters")


def cpu_threads(parallel: int) -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, n // max(1, parallel))
