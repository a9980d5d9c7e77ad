"""Which monitors an evaluation scores (the first step of automon.evaluation.run.evaluate): the base
model, one adapter, every adapter of a sweep, or the monitors a backend's config defines (probes);
adapters trained differently from how they would be evaluated are refused here."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from automon.adapter_meta import (ADAPTER_CONFIG_FILE, ADAPTER_META_FILE, AdapterMeta, canonical_adapter_config,
                                  check_adapter_files)
from automon.backends.vllm_engine import adapter_rank
from automon.data.identity import manifest_differences
from automon.data.io import load_build, sha256_file
from automon.evaluation.errors import AdapterMismatch, EvalError
from automon.models.loading import resolve_model_path
from automon.monitors import BASE, DEFINED_BY_BACKEND, JudgeMonitor, Monitor
from automon.prompts import FIT_VERSION

log = logging.getLogger("automon.evaluation")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "-", name).strip("-") or "adapter"


def adapter_run_name(adapter_dir: str | Path) -> str:
    """`runs/<run>/adapter` -> `<run>`; any other directory -> its own name."""
    p = Path(adapter_dir).resolve()
    return _safe(p.parent.name if p.name == "adapter" else p.name)


def adapter_hash(adapter_dir: str | Path) -> str:
    """sha256 over the adapter's weights and adapter_config.json (what changes its predictions), the config in
    its canonical form (adapter_meta.canonical_adapter_config: PEFT's set-valued lists in any order)."""
    d = Path(adapter_dir)
    weights = [d / n for n in ("adapter_model.safetensors", "adapter_model.bin") if (d / n).exists()]
    cfg = d / ADAPTER_CONFIG_FILE
    if not weights or not cfg.exists():
        raise EvalError(f"{d} is not a PEFT LoRA adapter directory (needs adapter_config.json and "
                        "adapter_model.safetensors); pass the <run>/adapter directory written by train/sft.py")
    h = hashlib.sha256()
    h.update(weights[0].name.encode() + b"\0")
    with open(weights[0], "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    h.update(cfg.name.encode() + b"\0" + canonical_adapter_config(d).encode("utf-8"))
    return h.hexdigest()


def check_adapter(meta: AdapterMeta, cfg: Any) -> list[str]:
    """Differences between how an adapter was trained and how it is about to be evaluated."""
    diffs = []
    m = cfg.model
    if meta.base_model != m.name or meta.pretrained != m.pretrained:
        diffs.append(f"base model: trained on model={meta.base_model} ({meta.pretrained}), "
                     f"evaluating model={m.name} ({m.pretrained})")
    if meta.prompt != cfg.prompt.name:
        diffs.append(f"prompt: trained with prompt={meta.prompt}, evaluating prompt={cfg.prompt.name}")
    # Adapters from before fit versions were recorded have none (unknown, not a known difference).
    if meta.prompt_fit and meta.prompt_fit != FIT_VERSION:
        diffs.append(f"prompt fit: trained with {meta.prompt_fit}, evaluating with {FIT_VERSION} "
                     "(long samples are shortened differently)")
    if bool(meta.enable_thinking) != bool(m.enable_thinking):
        diffs.append(f"thinking: trained with enable_thinking={meta.enable_thinking}, "
                     f"evaluating model.enable_thinking={m.enable_thinking}")
    return diffs


def peft_base_mismatch(adapter_dir: Path, cfg: Any) -> list[str]:
    """The base model PEFT recorded in adapter_config.json (what the weights were trained on) against
    the model about to be evaluated: automon_adapter.json alone can be copied or stale."""
    f = adapter_dir / "adapter_config.json"
    try:
        base = json.loads(f.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise EvalError(f"cannot read {f}: {e}", str(f), "pass the <run>/adapter directory written by "
                        "train/sft.py") from None
    if not base:
        return []  # PEFT leaves it empty for some models: nothing to compare
    evaluated = resolve_model_path(cfg.model)
    same = base == evaluated or base == cfg.model.pretrained or (
        os.path.isdir(base) and os.path.isdir(evaluated) and os.path.samefile(base, evaluated))
    if same:
        return []
    return [f"base model: {f} names base_model_name_or_path={base}, evaluating model={cfg.model.name} "
            f"({evaluated})"]


def adapter_dir_of(path: str | Path) -> Path:
    """The adapter directory `adapter=` means: the directory itself, or the directory of a file in it
    (adapter=<run>/adapter/adapter_model.safetensors)."""
    p = Path(path)
    if p.is_file() and (p.parent / ADAPTER_CONFIG_FILE).is_file():
        return p.parent
    if p.is_file():
        raise EvalError(f"adapter={p} is a file, not an adapter directory", "adapter",
                        f"pass the directory that holds {ADAPTER_CONFIG_FILE} and adapter_model.safetensors "
                        "(<run>/adapter, written by train/sft.py)")
    if not p.is_dir():
        raise EvalError(f"adapter directory {p} does not exist", "adapter",
                        "pass the <run>/adapter directory written by train/sft.py")
    return p


def _adapter_monitor(adapter_dir: Path, name: str, cfg: Any) -> Monitor:
    adapter_dir = adapter_dir_of(adapter_dir)
    check_adapter_files(adapter_dir)
    h = adapter_hash(adapter_dir)
    try:
        meta = AdapterMeta.read(adapter_dir)
    except FileNotFoundError as e:
        if not cfg.allow_mismatch:
            raise AdapterMismatch(str(e)) from None
        meta = None
    diffs = check_adapter(meta, cfg) if meta else [f"{ADAPTER_META_FILE} missing: training settings unknown"]
    diffs += [d for d in peft_base_mismatch(adapter_dir, cfg) if not any(x.startswith("base model") for x in diffs)]
    return JudgeMonitor(name=name, row=meta.subset if meta else name, artifact_dir=adapter_dir,
                        artifact_hash=h, rank=adapter_rank(adapter_dir), meta=meta, mismatches=diffs,
                        prompt=cfg.prompt.name, threshold=cfg.threshold)


def _base_monitor(cfg: Any) -> Monitor:
    return JudgeMonitor(name=BASE, row=BASE, prompt=cfg.prompt.name, threshold=cfg.threshold)


def _training_manifest(m: Monitor, recorded: str) -> tuple[str, dict] | None:
    """(directory, manifest) of the build adapter `m` was trained on, when its run's run.json (beside
    the adapter, or in the run_dir automon_adapter.json names) points at a build that is still there
    with the recorded data hash; else None."""
    runs = [Path(m.artifact_dir).parent] if m.artifact_dir is not None else []
    if m.meta is not None and isinstance(m.meta.extra.get("run_dir"), str):
        runs.append(Path(m.meta.extra["run_dir"]))
    for run in runs:
        try:
            mf = Path(json.loads((run / "run.json").read_text(encoding="utf-8"))["data_build"]) / "manifest.json"
            if sha256_file(mf) == recorded:
                return str(mf.parent), json.loads(mf.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def _what_differs(recorded: str, m: Monitor, build_dir: Any) -> str:
    """Which manifest fields of the adapter's training build differ from the evaluated build's, or
    why they cannot be named."""
    trained = _training_manifest(m, recorded)
    if trained is None:
        return ("the build it was trained on is not at hand (its run.json's data_build) to name the manifest "
                "fields that differ")
    try:
        now = load_build(build_dir).manifest
    except OSError:
        return f"trained on {trained[0]}"
    return f"manifest fields that differ from {trained[0]}: {'; '.join(manifest_differences(trained[1], now))}"


def training_build_notes(monitors: list[Monitor], manifest_hash: str, build_dir: Any, allow: bool) -> list[str]:
    """Adapters and probes trained on another data build than the one evaluated: its test samples may have
    been in their training data (a probe records its build's data hash, ProbeMonitor.manifest_hash). What is compared is the data hash, as automon_adapter.json records it
    (`data_manifest_hash`): the sha256 of the build's manifest.json, which holds what the build is and
    nothing of the machine that made it (automon.data.identity). Refused (EvalError) unless `allow`
    (allow_other_build=true), naming the manifest fields that differ when the adapter's training build
    is still where its run.json says; then one CONTAMINATED note per such adapter, for the report's
    opening. An adapter that records no build (not written by train/sft.py) cannot be checked: a
    warning says so."""
    other, notes = [], []
    probes = []
    for m in monitors:
        trained_on = getattr(m, "manifest_hash", "") if m.monitor_kind == "probe" else ""
        if trained_on and trained_on != manifest_hash:  # a probe: checked like an adapter
            probes.append(m)
            notes.append(f"CONTAMINATED (other build): probe {m.name} was trained on the data build "
                         f"{getattr(m, 'build_dir', '?')} (manifest sha256 {trained_on[:12]}...), not on {build_dir} "
                         f"({manifest_hash[:12]}...): test samples here may have been in its training data "
                         "(allow_other_build=true).")
        if m.meta is None or m.monitor_kind != "lora":
            continue
        recorded = str(m.meta.data_manifest_hash or "")
        if not recorded:
            log.warning("adapter %s records no training data build: whether test samples of %s were in its "
                        "training data cannot be checked", m.name, build_dir)
        elif recorded != manifest_hash:
            other.append((m, recorded))
            notes.append(f"CONTAMINATED (other build): adapter {m.name} was trained on the data build with "
                         f"manifest sha256 {recorded[:12]}..., not on {build_dir} ({manifest_hash[:12]}...): test "
                         "samples here may have been in its training data (allow_other_build=true).")
    if probes and not allow:
        raise EvalError(f"probe(s) {', '.join(m.name for m in probes)} were trained on another data build "
                        f"(backend.data_dir={getattr(probes[0], 'build_dir', '?')}) than data.dir={build_dir}: its "
                        "training split may hold this build's test samples", "backend.data_dir",
                        "train and evaluate the probes on one build (leave backend.data_dir at ${data.dir}), or "
                        "pass allow_other_build=true to evaluate anyway (the report is then marked CONTAMINATED)")
    if other and not allow:
        names = ", ".join(f"{m.name} ({recorded[:12]}...; {_what_differs(recorded, m, build_dir)})"
                          for m, recorded in other)
        raise EvalError(f"adapter(s) {names} were trained on another data build than data.dir={build_dir} "
                        f"(manifest sha256 {manifest_hash[:12]}...): the data hash (automon_adapter.json's "
                        "data_manifest_hash, the sha256 of the build's manifest.json) differs, so its test split "
                        "may hold samples they were trained on", "data.dir",
                        "evaluate on the build they were trained on (run.json of the run names it), or pass "
                        "allow_other_build=true to evaluate anyway (the report is then marked CONTAMINATED)")
    return notes


def sweep_adapters(sweep_dir: Path) -> list[tuple[str, Path]]:
    """(run name, adapter dir) for every subdirectory holding adapter/ (or itself an adapter)."""
    return sweep_runs(sweep_dir)[0]


def sweep_runs(sweep_dir: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(run name, adapter dir) for every subdirectory holding adapter/ (or itself an adapter), and a
    line for every training run there that has no adapter (unfinished, failed, preempted): a sweep
    never drops one without a word."""
    if not sweep_dir.is_dir():
        raise EvalError(f"sweep_dir {sweep_dir} does not exist")
    found, skipped = [], []
    for sub in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (sub / "adapter").is_dir():
            found.append((_safe(sub.name), sub / "adapter"))
        elif (sub / ADAPTER_CONFIG_FILE).exists():
            found.append((_safe(sub.name), sub))
        elif any((sub / n).exists() for n in ("config.yaml", "run.json", "checkpoints", "adapter", "train.log")):
            skipped.append(f"{sub.name}: {_unfinished_reason(sub)}")
    if not found:
        more = f" (training runs without an adapter: {'; '.join(skipped)})" if skipped else ""
        raise EvalError(f"sweep_dir {sweep_dir} has no subdirectory with adapter/adapter_config.json{more}; "
                        "point it at the directory that holds the training runs, and finish them first")
    return found, skipped


def _unfinished_reason(run_dir: Path) -> str:
    try:
        status = json.loads((run_dir / "run.json").read_text()).get("status", "unknown")
    except (OSError, ValueError, AttributeError):
        status = "no readable run.json"
    return f"no adapter (run status: {status}; rerun its train/sft.py command to finish it)"


def resolve_monitors(cfg: Any) -> list[Monitor]:
    """The monitors to score, mismatch-checked (AdapterMismatch unless allow_mismatch)."""
    own = cfg.backend.defines_monitors
    if own is not None:
        if cfg.sweep_dir or cfg.adapter:
            raise EvalError(f"backend={cfg.backend.name} scores its own monitors; drop sweep_dir= and adapter=")
        mons = DEFINED_BY_BACKEND[own](cfg, lambda build_dir: load_build(build_dir).manifest_hash)
    elif cfg.sweep_dir:
        found, _ = sweep_runs(Path(cfg.sweep_dir))
        mons = [_adapter_monitor(d, n, cfg) for n, d in found]
        if cfg.include_base:
            mons.insert(0, _base_monitor(cfg))
    elif cfg.adapter:
        d = adapter_dir_of(cfg.adapter)
        mons = [_adapter_monitor(d, adapter_run_name(d), cfg)]
    else:
        mons = [_base_monitor(cfg)]
    bad = [m for m in mons if m.mismatches]
    if bad and not cfg.allow_mismatch:
        lines = "\n".join(f"  {m.artifact_dir}: " + "; ".join(m.mismatches) for m in bad)
        first = bad[0].meta
        hint = (f" (e.g. model={first.base_model} prompt={first.prompt})"
                if first is not None else "")
        raise AdapterMismatch("the adapter was trained differently from how it would be evaluated:\n"
                              f"{lines}\nEvaluate it with the settings it was trained with{hint}, or pass "
                              "allow_mismatch=true to evaluate anyway (recorded in metrics.json).")
    # names must be unique after sanitising (runs `run 1` and `run-1`, a run dir named `base`): they key
    # the predictions, prediction caches and folders of one evaluation
    taken: set[str] = set()
    for m in mons:
        name = m.name if m.name not in taken else f"{m.name}-{(m.artifact_hash or 'x')[:8]}"
        k = 2
        while name in taken:
            name, k = f"{m.name}-{k}", k + 1
        m.name = name
        taken.add(name)
    # row names must be unique
    seen: dict[str, int] = {}
    for m in mons:
        seen[m.row] = seen.get(m.row, 0) + 1
    for m in mons:
        if seen[m.row] > 1 and m.row != BASE:
            m.row = f"{m.row} [{m.name}]"
    return mons
