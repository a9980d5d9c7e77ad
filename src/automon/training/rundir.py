"""The run directory: named from the config's identity, never from the clock.

    <run>/config.yaml          resolved config (what `rerun = resume` compares against)
    <run>/run.json             status, versions, code version, data build path + manifest hash; written
                               first (with RUN_FORMAT): it is what makes a directory a run
    <run>/checkpoints/         checkpoint-<step>/ (Trainer format; the newest complete one resumes)
    <run>/metrics.jsonl        one line per logged step: loss, lr, grad_norm, tokens seen, tokens/s
    <run>/train_metrics.json   summary: first/last loss, steps, tokens, samples shortened, data stats
    <run>/train.log            the run's log
    <run>/adapter/             the final PEFT adapter + automon_adapter.json + README.md (model card)
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

from automon import stage_status
from automon.adapter_meta import ADAPTER_META_FILE, AdapterError, check_adapter_files, safetensors_shapes
from automon.data.io import resolved
from automon.schema import SUBSETS
from automon.stage_status import Currency, Status
from automon.training.errors import RunDirConflict, TrainConfigError, TrainError

log = logging.getLogger(__name__)

# Keys that may change between a run and its resumption without changing what is trained. The kernel keys
# (gradient checkpointing, attention implementation, Liger) compute the same function with other memory use
# and float rounding, and depend on the machine: run.json records each segment's (its "kernels").
NON_IDENTITY_KEYS = ("wandb", "data.dir", "output_dir", "overwrite", "train.logging_steps",
                     "train.save_steps", "train.save_total_limit", "trainer.gradient_checkpointing",
                     "trainer.attn_implementation", "trainer.liger")
CHECKPOINTS = "checkpoints"
# What a training run writes in its directory (and wandb, when wandb.dir is unset); anything else is
# not ours to delete (overwrite=true refuses a directory that holds it).
RUN_DIR_NAMES = frozenset({"config.yaml", "run.json", CHECKPOINTS, "metrics.jsonl", "train_metrics.json",
                           "train.log", "adapter", ".adapter.tmp", ".lock", "wandb"})
_CKPT = re.compile(r"^checkpoint-(\d+)$")
# run.json's "format": a directory is a training run's only if a run wrote it (or its adapter record),
# never because it holds a file with a generic name such as config.yaml or train.log.
RUN_FORMAT = "automon-train-run-v1"


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
    if not is_run_dir(run_dir):
        if run_dir.is_dir() and any(p.name != ".lock" for p in run_dir.iterdir()):
            return Status(Currency.STALE, "is not empty and holds no automon run (no run.json of train/sft.py)")
        return Status(Currency.MISSING, "not trained yet")
    if not cfg_file.exists():  # killed between writing run.json and config.yaml: nothing trained yet
        return Status(Currency.RESUMABLE, "incomplete (started, no config.yaml yet): starts again")
    from omegaconf import OmegaConf

    try:
        old = OmegaConf.to_container(OmegaConf.load(cfg_file), resolve=True)
        prev = read_run_info(run_dir)
    except TrainError as e:
        return Status(Currency.STALE, f"holds a damaged run: {e.what}")
    except Exception as e:  # noqa: BLE001 - a cut or edited config.yaml: OmegaConf/YAML raise many types
        return Status(Currency.STALE, f"holds a damaged run: {cfg_file} cannot be read ({type(e).__name__})")
    if not isinstance(old, dict):
        return Status(Currency.STALE, f"holds a damaged run: {cfg_file} is not a config")
    diff = config_diff(old, cfg)
    if diff:
        return Status(Currency.STALE, stage_status.diff_reason("holds a run with a different config", diff, 8))
    if prev and prev.get("data_manifest_hash") != manifest_hash:
        old_hash = str(prev.get("data_manifest_hash", "?"))[:16]
        return Status(Currency.STALE, f"holds a run of another data build (the data build changed: it was "
                                      f"trained on {prev.get('data_build')} with manifest sha256 {old_hash}, "
                                      f"now {build_path} has {manifest_hash[:16]})")
    ckpt = last_complete_checkpoint(run_dir)
    where = f"resumes from {ckpt.name}" if ckpt else "no checkpoint yet, starts again"
    if prev and prev.get("status") == "complete":
        damage = adapter_damage(run_dir / "adapter")
        if damage is None:
            return Status(Currency.CURRENT, f"complete, {prev.get('steps', '?')} steps, same config and data build")
        # the record says complete, the files say otherwise: the files decide
        return Status(Currency.RESUMABLE, f"complete by run.json, but {damage}: rerunning writes it again ({where})")
    return Status(Currency.RESUMABLE, f"incomplete (status {(prev or {}).get('status', 'unknown')}): {where}")


def adapter_damage(adapter_dir: Path) -> str | None:
    """None when the adapter has every file evaluation relies on, intact; else what is wrong."""
    if not (adapter_dir / ADAPTER_META_FILE).is_file():
        return f"its adapter lacks {ADAPTER_META_FILE}"
    try:
        check_adapter_files(adapter_dir)
    except AdapterError as e:
        return f"its adapter is missing or damaged ({e.what})"
    return None


def read_run_info(run_dir: Path) -> dict | None:
    """The run's run.json, or None before the first training segment wrote it."""
    p = run_dir / "run.json"
    if not p.exists():
        return None
    try:
        info = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise TrainError(f"{p} cannot be read ({e})", str(p), "pass overwrite=true to start the run again, or "
                         "choose another output_dir=") from None
    if not isinstance(info, dict):
        raise TrainError(f"{p} is not a run record (a JSON {type(info).__name__})", str(p),
                         "pass overwrite=true to start the run again, or choose another output_dir=")
    return info


def is_run_dir(run_dir: Path) -> bool:
    """Whether train/sft.py wrote `run_dir`: its run.json is a run record (RUN_FORMAT, or a record of a
    run from before the format was written), or, when run.json is damaged, the run's own files say so:
    automon's adapter record, or a Trainer checkpoint under checkpoints/."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = None
    if isinstance(info, dict) and (info.get("format") == RUN_FORMAT
                                   or {"status", "data_manifest_hash", "subsets"} <= set(info)):
        return True
    return ((run_dir / "adapter" / ADAPTER_META_FILE).is_file()
            or any((run_dir / CHECKPOINTS).glob("checkpoint-*/trainer_state.json")))


def foreign_entries(run_dir: Path) -> list[str]:
    """Names in `run_dir` that are not a training run's: in a run, what no run writes (user files, a
    data build, another tool's output); in a directory no run wrote, everything (its config.yaml or
    train.log are someone else's)."""
    if not run_dir.is_dir():
        return []
    names = sorted(p.name for p in run_dir.iterdir() if p.name != ".lock")
    if not is_run_dir(run_dir):
        return names
    return [n for n in names if n not in RUN_DIR_NAMES and not n.endswith(".tmp")]


def refuse_foreign(run_dir: Path, build_dir: Path) -> None:
    """output_dir must be a training run's directory: never the data build, inside it or around it, never
    a directory of files no run wrote (overwrite=true would delete them)."""
    out, b = resolved(run_dir, "output_dir"), Path(build_dir).resolve()
    if out == b or b in out.parents or out in b.parents:
        where = "is the data build" if out == b else ("is inside" if b in out.parents else "holds") + " the data build"
        raise RunDirConflict(f"output_dir={run_dir} {where} {build_dir}", "output_dir",
                             "choose an output_dir= outside the data build (or leave it unset: runs/<subset>__...)")
    other = foreign_entries(run_dir)
    if other:
        if "manifest.json" in other:
            what = "a data build (manifest.json)"
        elif is_run_dir(run_dir) or any(n not in RUN_DIR_NAMES for n in other):
            what = "files a training run does not write"
        else:  # config.yaml, train.log, ... with no run record: a user's files of the same names
            what = "files but no training run (no run.json written by train/sft.py)"
        shown = ", ".join(other[:6]) + (f" (+{len(other) - 6} more)" if len(other) > 6 else "")
        raise RunDirConflict(f"output_dir={run_dir} holds {what}: {shown}", "output_dir",
                             "choose another output_dir= (training refuses to write, or with overwrite=true "
                             "delete, a directory that is not a training run's)")


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
    """Newest checkpoint whose trainer_state.json (written last by the Trainer) parses and whose files are
    whole; a damaged newer one is named in a warning and passed over."""
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
        if not (any(p.glob("adapter_model.*")) and (p / "optimizer.pt").exists()):
            continue
        damage = checkpoint_damage(p)
        if damage is None:
            return p
        log.warning("%s: %s; resuming from the checkpoint before it, if any", p, damage)
    return None


def checkpoint_damage(ckpt: Path) -> str | None:
    """What is wrong with a checkpoint whose trainer_state.json parses (None: nothing found): a torch file
    (optimizer.pt, scheduler.pt, rng_state*.pth) that is not a whole zip archive (torch.save's format; a
    cut file has no central directory at its end), or adapter weights cut short."""
    import zipfile

    for f in sorted([*ckpt.glob("*.pt"), *ckpt.glob("*.pth")]):
        try:
            with zipfile.ZipFile(f) as z:
                end = max((i.header_offset + i.compress_size for i in z.infolist()), default=0)
            if end > f.stat().st_size:
                return f"{f.name} is cut short"
        except (OSError, zipfile.BadZipFile, ValueError) as e:
            return f"{f.name} is damaged or cut short ({type(e).__name__}: {e})"
    weights = ckpt / "adapter_model.safetensors"
    if weights.is_file():
        try:
            safetensors_shapes(weights)
        except AdapterError as e:
            return e.what
    return None


def checkpoint_step(ckpt: Path) -> int:
    return int(_CKPT.match(ckpt.name).group(1))  # type: ignore[union-attr]


def trim_metrics(path: Path, max_step: int) -> None:
    """Drop logged steps after the checkpoint we resume from (they are trained again)."""
    if not path.exists():
        return
    keep = [json.dumps(m) for m in read_metrics(path) if m.get("step", 0) <= max_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(k + "\n" for k in keep))
    os.replace(tmp, path)


def refuse_odd_run_files(run_dir: Path) -> None:
    """The files a run writes must be files: a directory named metrics.jsonl (or run.json, ...) fails a
    run only when it is first written or read, with a traceback."""
    for name in ("config.yaml", "run.json", "metrics.jsonl", "train_metrics.json", "train.log"):
        p = run_dir / name
        if p.exists() and not p.is_file():
            raise TrainError(f"{p} is a directory, not the run's {name}", str(p),
                             "remove or rename it, or choose another output_dir=")


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl's records. A torn last line (a kill mid-write) is dropped with a warning; a bad line
    before it is damage, not a kill, and stops the run with its file and line."""
    if not path.exists():
        return []
    if not path.is_file():
        refuse_odd_run_files(path.parent)
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError(f"a JSON {type(rec).__name__}, not a record")
        except ValueError as e:
            if i == last:
                log.warning("%s:%d: dropped a torn last line (%s), left by a killed run", path, i + 1, e)
                continue
            raise TrainError(f"{path.name} line {i + 1} is not a metrics record ({e})", f"{path}:{i + 1}",
                             "delete that line (the run then resumes), or pass overwrite=true to start "
                             "again") from None
        out.append(rec)
    return out


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
