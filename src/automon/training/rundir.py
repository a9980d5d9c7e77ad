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

from automon import stage_status
from automon.adapter_meta import ADAPTER_META_FILE
from automon.schema import SUBSETS
from automon.stage_status import Currency, Status
from automon.training.errors import TrainConfigError

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


def identity(cfg: dict) -> dict[str, Any]:
    return stage_status.identity(cfg, NON_IDENTITY_KEYS)


def config_diff(old: dict, new: dict) -> list[str]:
    return stage_status.config_diff(old, new, NON_IDENTITY_KEYS)


def run_status(run_dir: Path, cfg: dict, manifest_hash: str, build_path: str) -> Status:
    """Whether `run_dir` holds this run (same identity, same data build), finished or not.

    stale: another config's run, another build's run, or a directory that is not a run at all;
    train/sft.py refuses it unless overwrite=true. resumable: rerunning continues from the newest
    complete checkpoint. current: the adapter is written, nothing to do.
    """
    cfg_file = run_dir / "config.yaml"
    if not cfg_file.exists():
        if run_dir.exists() and any(p.name not in {"train.log", ".lock"} for p in run_dir.iterdir()):
            return Status(Currency.STALE, "is not empty and holds no automon run (no config.yaml)")
        return Status(Currency.MISSING, "not trained yet")
    from omegaconf import OmegaConf

    old = OmegaConf.to_container(OmegaConf.load(cfg_file), resolve=True)
    diff = config_diff(old, cfg)
    if diff:
        return Status(Currency.STALE, stage_status.diff_reason("holds a run with a different config", diff, 8))
    prev = read_run_info(run_dir)
    if prev and prev.get("data_manifest_hash") != manifest_hash:
        old_hash = str(prev.get("data_manifest_hash", "?"))[:16]
        return Status(Currency.STALE, f"holds a run of another data build (the data build changed: it was "
                                      f"trained on {prev.get('data_build')} with manifest sha256 {old_hash}, "
                                      f"now {build_path} has {manifest_hash[:16]})")
    if prev and prev.get("status") == "complete" and (run_dir / "adapter" / ADAPTER_META_FILE).exists():
        return Status(Currency.CURRENT, f"complete, {prev.get('steps', '?')} steps, same config and data build")
    ckpt = last_complete_checkpoint(run_dir)
    where = f"resumes from {ckpt.name}" if ckpt else "no checkpoint yet, starts again"
    return Status(Currency.RESUMABLE, f"incomplete (status {(prev or {}).get('status', 'unknown')}): {where}")


def read_run_info(run_dir: Path) -> dict | None:
    """The run's run.json, or None before the first training segment wrote it."""
    p = run_dir / "run.json"
    return json.loads(p.read_text()) if p.exists() else None


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
