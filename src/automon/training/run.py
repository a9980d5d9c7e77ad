"""`run(cfg)`: one LoRA SFT run of the monitor, from a data build to `<run>/adapter/`.

Stages: validate config -> load build -> check the run dir (same config + same data, or resume is
refused) -> pick the trainer plug-in (imports unsloth before transformers) -> render + tokenise
(shortening over-long responses, decode-checking the labels) -> train, resuming from the newest
complete checkpoint -> save the adapter atomically with automon_adapter.json and a model card.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import automon.training.rundir as rd
from automon.adapter_meta import AdapterMeta, write_canonical_adapter_config
from automon.config.train import SFTConfig
from automon.errors import disk_full
from automon.models.loading import load_tokenizer, resolve_model_path
from automon.outdir import ensure_writable_dir
from automon.prompts import FIT_VERSION
from automon.stage_status import Currency
from automon.training.card import model_card
from automon.training.data import ExampleBuilder, select_samples, supervised_text
from automon.training.errors import RunDirConflict, TrainConfigError, TrainError
from automon.training.identity import resolve, run_status
from automon.training.sft_args import make_sft_args
from automon.training.trainers import (Throughput, check_kernel_options, cuda_available, describe_step, get_trainer,
                                       resolve_trainer_name)
from automon.versions import code_version, library_versions

log = logging.getLogger("automon.training")

@contextlib.contextmanager
def _run_lock(run_dir: Path):
    import fcntl

    f = open(run_dir / ".lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise RunDirConflict(f"another process is already training into {run_dir}") from None
    try:
        yield
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


@contextlib.contextmanager
def _log_to(path: Path):
    root = logging.getLogger()
    fh = logging.FileHandler(path, encoding="utf-8")
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(fh)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
               for h in root.handlers):
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        root.addHandler(sh)
    try:
        yield
    finally:
        root.removeHandler(fh)
        fh.close()


def _manifest_summary(manifest: dict) -> dict:
    return {k: manifest[k] for k in ("format", "seed", "counts", "files") if k in manifest}


def _init_wandb(c: SFTConfig, run_dir: Path, resolved: dict, build, subsets: list[str]):
    if c.wandb.mode == "disabled":
        return None
    # The config decides (offline by default, no key needed); a stray WANDB_MODE must not override it.
    os.environ["WANDB_MODE"] = c.wandb.mode
    import wandb

    wandb_dir = Path(c.wandb.dir) if c.wandb.dir else run_dir
    wandb_dir.mkdir(parents=True, exist_ok=True)
    run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]  # same run dir -> same wandb run
    return wandb.init(project=c.wandb.project, entity=c.wandb.entity, dir=str(wandb_dir), mode=c.wandb.mode,
                      name=run_dir.name, id=run_id, resume="allow",
                      config={"automon": resolved, "subsets": subsets,
                              "data_manifest_hash": build.manifest_hash, "data_build": str(build.path),
                              "data_manifest": _manifest_summary(build.manifest)})


def run(cfg: Any) -> int:
    """Train one adapter. Returns 0 when done (or already done), 128 + signal when stopped by
    SIGTERM/SIGUSR1 after saving a checkpoint. User errors raise TrainError / BuildNotFound /
    ModelLoadError (train/sft.py turns them into exit status 2)."""
    t0 = time.perf_counter()
    r = resolve(cfg)
    c, resolved, subsets, label, run_dir, build = r.cfg, r.resolved, r.subsets, r.label, r.run_dir, r.build
    # Cheap checks before the model loads: the run dir can be written, the data is what the build wrote.
    rd.refuse_foreign(run_dir, build.path)  # never the data build, never a folder of other files
    rd.refuse_odd_run_files(run_dir)
    ensure_writable_dir(run_dir, "output_dir")
    build.verify("train")
    counts = (build.manifest.get("counts") or {}).get("train")
    if isinstance(counts, dict):  # the manifest's counts say it before the model loads; the samples say it again
        _refuse_missing_subsets(build, subsets, label, {k for k, v in counts.items() if v})

    prev = None
    if not c.overwrite:
        st = run_status(r)  # the same answer pipeline.py acts on
        if st.state is Currency.STALE:
            raise RunDirConflict(f"output dir {run_dir} {st.reason}. Rerunning resumes only the same config on "
                                 f"the same data build: choose another output_dir=, or pass overwrite=true to "
                                 f"delete {run_dir} and start again")
        if st.current:
            print(f"{run_dir} is already complete (adapter at {run_dir / 'adapter'}); nothing to do. "
                  "Pass overwrite=true to train again.", file=sys.stderr)
            return 0
        prev = rd.read_run_info(run_dir)
    # the trainer and kernel keys where this machine cannot run them, before the run dir is touched
    check_kernel_options(c, resolve_trainer_name(c.trainer.name), cuda_available())
    run_dir.mkdir(parents=True, exist_ok=True)
    with _run_lock(run_dir):
        if c.overwrite:
            rd.clear(run_dir, keep=(".lock",))
        _claim(run_dir, resolved, subsets, label, build)
        with _log_to(run_dir / "train.log"):
            try:
                return _train(c, resolved, subsets, label, run_dir, build, prev, t0, r.tokens_per_step_asked)
            except Exception as e:
                if not disk_full(e):
                    raise
                raise TrainError(f"cannot write the run: no space left on device ({e})",
                                 getattr(e, "filename", None) or str(run_dir),
                                 "free some space (or quota) there and rerun the same command: it resumes from "
                                 "the newest complete checkpoint") from e


def _budget_source(asked, prev: dict | None, run_info: dict) -> str:
    """Where the run's pack budget comes from, for the log."""
    if asked is not None:
        return f"train.tokens_per_step={asked}"
    started = run_info["started_on"]
    what = "the CPU default (CUDA's is max_seq_length)" if not started.startswith("cuda") else "max_seq_length, the CUDA default"
    again = f", the device this run started on ({started})" if prev and started != run_info["device"] else ""
    return f"train.tokens_per_step=null: {what}{again}"


def _refuse_missing_subsets(build, subsets: list[str], label: str, present: set[str]) -> None:
    """Every chosen subset must have training samples in the build: subset=[safety_qa,sg_code] on a build
    without sg_code's would train on safety_qa alone and be recorded as safety_qa+sg_code."""
    missing = [s for s in subsets if s not in present]
    if not missing:
        return
    has = sorted((build.manifest.get("counts") or {}).get("train") or {})
    what = f"for {label}" if len(missing) == len(subsets) else f"for {', '.join(missing)} (of subset={label})"
    raise TrainConfigError(
        f"the build at {build.path} has no training samples {what} (its train split has "
        f"{', '.join(has) or 'no subsets'})", "subset",
        f"choose subsets it has (e.g. subset={has[0] if has else 'all'}), or rebuild it with "
        f"{', '.join(missing)}'s training samples (python data_build/build.py subsets=[{','.join(subsets)}] ...)")


def _refuse_nonfinite_weights(model, run_dir: Path) -> None:
    """A trained LoRA weight that is inf or NaN scores every sample alike (MR = FAR = 1): never saved."""
    import torch

    bad = [n for n, p in model.named_parameters() if p.requires_grad and not bool(torch.isfinite(p).all())]
    if bad:
        raise TrainError(f"training diverged: {len(bad)} trained weight tensor(s) hold inf or NaN (e.g. {bad[0]}); "
                         "no adapter was written", str(run_dir),
                         "lower train.lr (and check train.max_grad_norm), then rerun with overwrite=true")


def _claim(run_dir: Path, resolved: dict, subsets: list[str], label: str, build) -> None:
    """run.json first, then config.yaml, before any other file: a directory holds a run only when a run
    record says so (automon.training.rundir.is_run_dir), so nothing else is ever taken for one."""
    from omegaconf import OmegaConf

    if not (run_dir / "run.json").exists():
        rd.write_json(run_dir / "run.json", {
            "format": rd.RUN_FORMAT, "status": "starting", "subsets": subsets, "subset": label,
            "data_build": str(Path(build.path).resolve()), "data_manifest_hash": build.manifest_hash})
    if not (run_dir / "config.yaml").exists():
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))


def _examples(c: SFTConfig, build, subsets: list[str], label: str, tok, max_len: int):
    """The tokenised training examples of the run's subsets: (dataset, stats), logged with one example."""
    samples = select_samples(build.samples("train"), subsets)
    _refuse_missing_subsets(build, subsets, label, {s.subset for s in samples})
    builder = ExampleBuilder(tok, c.prompt.name, c.model.enable_thinking, max_len)
    dataset, stats, first = builder.build_dataset(samples)
    summary = stats.summary()
    log.info("%d training samples (%s); %d shortened to fit %d tokens; lengths mean %s p95 %s max %s",
             stats.n, summary["by_subset"], stats.responses_shortened, max_len,
             summary["length_mean"], summary["length_p95"], summary["length_max"])
    log.info("example %s: prompt ends %r; supervised tokens %r", first.sample_id, first.prompt[-80:],
             supervised_text(tok, first))
    return dataset, stats


def _summary(trainer, out, metrics_path: Path, run_info: dict) -> dict:
    """train_metrics.json: steps, tokens, the loss curve and this segment's speed."""
    metrics = rd.read_metrics(metrics_path)
    return {
        "steps": trainer.state.global_step, "epochs": trainer.state.epoch,
        "tokens_seen": int(trainer.state.num_input_tokens_seen),
        "loss_first": metrics[0]["loss"] if metrics else None,
        "loss_last": metrics[-1]["loss"] if metrics else None,
        "loss_per_step": [[m["step"], m["loss"]] for m in metrics],
        "train_runtime_s_last_segment": out.metrics.get("train_runtime"),
        "tokens_per_s_last_segment": (round(out.metrics["train_tokens_per_second"], 1)
                                      if "train_tokens_per_second" in out.metrics else None),
        "max_seq_length": run_info["max_seq_length"], "data": run_info["data"], "trainer": run_info["trainer"],
        "packing": run_info["packing"],
    }


def _write_adapter(c: SFTConfig, model, run_dir: Path, run_info: dict, summary: dict, build, subsets: list[str],
                   label: str) -> Path:
    """<run>/adapter, written whole into a temporary directory and moved into place: the LoRA weights,
    automon_adapter.json (what an evaluation checks it against) and the model card."""
    _refuse_nonfinite_weights(model, run_dir)
    versions, trainer_name, max_len = run_info["versions"], run_info["trainer"], run_info["max_seq_length"]
    tmp = run_dir / ".adapter.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(str(tmp))
    write_canonical_adapter_config(tmp)
    AdapterMeta(base_model=c.model.name, pretrained=c.model.pretrained, prompt=c.prompt.name,
                enable_thinking=c.model.enable_thinking, subset=label, data_manifest_hash=build.manifest_hash,
                lora_rank=c.train.lora.r, automon_version=versions.get("automon", ""),
                code_version=run_info["code_version"], prompt_fit=FIT_VERSION,
                extra={"subsets": subsets, "lora_alpha": c.train.lora.alpha,
                       "lora_targets": list(c.train.lora.targets), "trainer": trainer_name,
                       "max_seq_length": max_len, "steps": summary["steps"], "seed": c.train.seed,
                       "packing": run_info["packing"], "run_dir": str(run_dir)}).write(tmp)
    (tmp / "README.md").write_text(model_card(
        cfg=c, run_name=run_dir.name, subsets=subsets, subset_label=label, base_path=run_info["base_model_path"],
        trainer=trainer_name, manifest_hash=build.manifest_hash, build_path=str(build.path),
        summary=summary, versions=versions, code_version=run_info["code_version"]))
    adapter_dir = run_dir / "adapter"
    if adapter_dir.exists():
        shutil.rmtree(adapter_dir)
    os.replace(tmp, adapter_dir)
    return adapter_dir


def _train(c: SFTConfig, resolved: dict, subsets: list[str], label: str, run_dir: Path, build, prev,
           t0: float, budget_asked=None) -> int:
    # The plug-in is chosen, and unsloth imported, before anything imports transformers.
    trainer_name = resolve_trainer_name(c.trainer.name)
    on_cuda = cuda_available()
    plugin = get_trainer(trainer_name)
    plugin.prepare()

    # Local: callbacks imports transformers (TrainerCallback), which must come after plugin.prepare() (unsloth).
    from automon.training.callbacks import MetricsCallback, PreemptionCallback, PreemptionGuard

    import transformers
    from transformers.trainer_callback import PrinterCallback

    transformers.logging.set_verbosity_warning()
    log.info("run dir %s; subsets %s; model %s; prompt %s; trainer %s", run_dir, ",".join(subsets),
             c.model.name, c.prompt.name, trainer_name)

    tok = load_tokenizer(c.model)
    model_path = resolve_model_path(c.model)
    max_len = min(c.train.max_seq_length, c.model.max_position_embeddings)
    dataset, stats = _examples(c, build, subsets, label, tok, max_len)

    # ---- run record -------------------------------------------------------------------------
    device = "cuda" if on_cuda else "cpu"
    run_info = {
        "format": rd.RUN_FORMAT, "status": "running", "trainer": trainer_name, "device": device,
        # the device of the first segment: what train.tokens_per_step=null resolved by (identity.started_on_cuda)
        "started_on": (prev or {}).get("started_on") or (prev or {}).get("device") or device,
        "subsets": subsets, "subset": label, "data_build": str(Path(build.path).resolve()),
        "data_manifest_hash": build.manifest_hash, "base_model_path": model_path,
        "code_version": code_version(), "versions": library_versions(),
        "max_seq_length": max_len, "prompt_fit": FIT_VERSION, "data": stats.summary(),
        "segments": (prev or {}).get("segments", 0) + 1,
    }
    if prev and prev.get("trainer") not in (None, trainer_name):
        log.warning("this run was started with trainer %s and continues with %s", prev["trainer"], trainer_name)
    rd.write_json(run_dir / "run.json", run_info)

    # ---- trainer ----------------------------------------------------------------------------
    wb = _init_wandb(c, run_dir, resolved, build, subsets)
    try:
        args = make_sft_args(c, run_dir, on_cuda, ["wandb"] if wb is not None else [], trainer=trainer_name)
        guard = PreemptionGuard()
        throughput = Throughput()
        metrics_path = run_dir / "metrics.jsonl"
        callbacks = [MetricsCallback(metrics_path, throughput), PreemptionCallback(guard)]
        if c.train.packing:
            log.info("packs of up to %d tokens: %s", c.train.tokens_per_step, _budget_source(budget_asked, prev, run_info))
        trainer = plugin.build(c, model_path, tok, dataset, args, callbacks, max_len)
        trainer.automon_throughput = throughput
        trainer.remove_callback(PrinterCallback)  # MetricsCallback logs each step once, in our format
        run_info["packing"] = getattr(trainer, "automon_packing", None)  # how examples were batched (None: unpacked)
        # this segment's kernels (not part of the run's identity: the same function, other memory and rounding)
        run_info["kernels"] = {"gradient_checkpointing": bool(args.gradient_checkpointing or
                                                              getattr(trainer, "automon_unsloth_checkpointing", False)),
                               "attn_implementation": c.trainer.attn_implementation if trainer_name == "peft" else None,
                               "liger": bool(c.trainer.liger)}
        rd.write_json(run_dir / "run.json", run_info)
        summary = stats.summary()
        log.info("%s", describe_step(run_info["packing"], stats.n, summary["length_mean"] or 0.0, c.train.batch_size,
                                     args.gradient_accumulation_steps, c.train.max_steps, c.train.epochs))
        ckpt = rd.last_complete_checkpoint(run_dir)
        if ckpt is not None:
            log.info("resuming from %s", ckpt)
            rd.trim_metrics(metrics_path, rd.checkpoint_step(ckpt))
        elif metrics_path.exists():
            metrics_path.unlink()  # a fresh start: no stale lines from a run that never checkpointed
        with guard:
            out = trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)

        if guard.signum is not None:
            done = rd.last_complete_checkpoint(run_dir)
            run_info.update(status="preempted", checkpoint=str(done) if done else None)
            rd.write_json(run_dir / "run.json", run_info)
            print(f"stopped by signal {guard.signum} after saving {done}; rerun the same command to resume",
                  file=sys.stderr)
            return 128 + guard.signum

        # ---- adapter ----------------------------------------------------------------------------
        summary = _summary(trainer, out, metrics_path, run_info)
        adapter_dir = _write_adapter(c, trainer.model, run_dir, run_info, summary, build, subsets, label)
        summary["wall_time_s_last_segment"] = round(time.perf_counter() - t0, 1)
        rd.write_json(run_dir / "train_metrics.json", summary)
        run_info.update(status="complete", adapter=str(adapter_dir), steps=summary["steps"])
        rd.write_json(run_dir / "run.json", run_info)
        if wb is not None:
            wb.summary.update({"samples_shortened": stats.responses_shortened, "train_samples": stats.n})
        log.info("done: %d steps, loss %s -> %s; adapter at %s (%.1f s)", summary["steps"],
                 summary["loss_first"], summary["loss_last"], adapter_dir, time.perf_counter() - t0)
        return 0
    finally:
        if wb is not None:
            wb.finish()
