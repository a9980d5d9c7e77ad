"""The run directory: named from the config's identity, never from the clock.

    <run>/config.yaml          resolved config (what `rerun = resume` compares against)
    <run>/run.json             status, versions, code version, data build path + manifest hash
    <run>/checkpoints/         checkpoint-<step>/ (Trainer format; the newest complete one resumes)
    <run>/metrics.jsonl        one line per logged step: loss, lr, grad_norm, tokens seen, tokens/s
    <run>/train_metrics.json   summary: first/last loss, steps, tokens, samples shortened, data stats
    <run>/train.log            the run's log
    <run>/adapter/             the final PEFT adapter + automon_adapter.json + README.md (model card)
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

from automon.schema import SUBSETS
from automon.training.errors import RunDirConflict, TrainConfigError

# Keys that may change between a run and its resumption without changing what is trained.
NON_IDENTITY_KEYS = ("wandb", "data.dir", "output_dir", "overwrite", "train.logging_steps",
                     "train.save_steps", "train.save_total_limit")
CHECKPOINTS = "checkpoints"
_CKPT = re.compile(r"^checkpoint-(\d+)$")


def subset_names(include: dict[str, bool]) -> list[str]:
    """Selected subsets in canonical order; raises on unknown names or an empty selection."""
    bad = sorted(k for k in include if k not in SUBSETS)
    if bad:
        raise TrainConfigError(f"unknown subset {', '.join(map(repr, bad))}; valid subsets: "
                               f"{', '.join(SUBSETS)} (and all), e.g. subset=safety_code, subset=all "
                               f"or subset=[safety_qa,sg_code]")
    names = [s for s in SUBSETS if include.get(s)]
    if not names:
        raise TrainConfigError(f"no subset selected; choose one of {', '.join(SUBSETS)}, all, "
                               "or a list such as subset=[safety_qa,sg_code]")
    return names


def subset_label(names: Iterable[str]) -> str:
    """`all` for the six subsets, the name for one, `a+b` for a list."""
    names = list(names)
    return "all" if names == list(SUBSETS) else "+".join(names)


def run_name(subset: str, model: str, prompt: str, seed: int) -> str:
    return f"{subset}__{model}__{prompt}__seed{seed}"


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def identity(cfg: dict) -> dict[str, Any]:
    flat = _flatten(cfg)
    return {k: v for k, v in flat.items()
            if not any(k == n or k.startswith(n + ".") for n in NON_IDENTITY_KEYS)}


def config_diff(old: dict, new: dict) -> list[str]:
    a, b = identity(old), identity(new)
    return [f"{k}: {a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, "<absent>") != b.get(k, "<absent>")]


def check_existing(run_dir: Path, cfg: dict, manifest_hash: str, build_path: str) -> dict | None:
    """Make sure `run_dir` is this run's (or empty). Returns the previous run.json, if any."""
    cfg_file, run_file = run_dir / "config.yaml", run_dir / "run.json"
    if not cfg_file.exists():
        if run_dir.exists() and any(p.name not in {"train.log", ".lock"} for p in run_dir.iterdir()):
            raise RunDirConflict(f"output dir {run_dir} is not empty and holds no automon run (no config.yaml); "
                                 "choose another output_dir=, or pass overwrite=true to delete it")
        return None
    from omegaconf import OmegaConf

    old = OmegaConf.to_container(OmegaConf.load(cfg_file), resolve=True)
    diff = config_diff(old, cfg)
    hint = f"choose another output_dir=, or pass overwrite=true to delete {run_dir} and start again"
    if diff:
        raise RunDirConflict(f"output dir {run_dir} holds a run with a different config ("
                             + "; ".join(diff[:8]) + (" ..." if len(diff) > 8 else "")
                             + f"). Rerunning resumes only the same config: {hint}")
    prev = json.loads(run_file.read_text()) if run_file.exists() else None
    if prev and prev.get("data_manifest_hash") != manifest_hash:
        old_hash = str(prev.get("data_manifest_hash", "?"))[:16]
        raise RunDirConflict(f"the data build changed under output dir {run_dir}: it was trained on "
                             f"{prev.get('data_build')} with manifest sha256 {old_hash}, now {build_path} has "
                             f"{manifest_hash[:16]}. Resuming would mix two datasets: {hint}")
    return prev


def clear(run_dir: Path, keep: Iterable[str] = ()) -> None:
    """Delete everything in `run_dir` but the names in `keep` (overwrite=true)."""
    for p in run_dir.iterdir():
        if p.name in keep:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def last_complete_checkpoint(run_dir: Path) -> Path | None:
    """Newest checkpoint whose trainer_state.json (written last by the Trainer) parses."""
    d = run_dir / CHECKPOINTS
    if not d.is_dir():
        return None
    found = sorted(((int(m.group(1)), p) for p in d.iterdir() if (m := _CKPT.match(p.name)) and p.is_dir()),
                   reverse=True)
    for _, p in found:
        try:
            json.loads((p / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        if any(p.glob("adapter_model.*")) and (p / "optimizer.pt").exists():
            return p
    return None


def checkpoint_step(ckpt: Path) -> int:
    return int(_CKPT.match(ckpt.name).group(1))  # type: ignore[union-attr]


def trim_metrics(path: Path, max_step: int) -> None:
    """Drop logged steps after the checkpoint we resume from (they are trained again)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= max_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(k + "\n" for k in keep))
    os.replace(tmp, path)


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
