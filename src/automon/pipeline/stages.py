"""The stages as the pipeline drives them: the overrides it derives for each from
conf/pipeline.yaml, the stage's config composed from exactly those overrides, the stage's own
answer on whether its output is current for that config, and the command line (the same
overrides) that runs it.

The pipeline keeps no notion of "current" of its own: it asks
  build  automon.data.status.status(cfg)        (manifest, file and source sha256s, config identity)
  train  automon.training.status.status(cfg)    (run dir identity, data build, finished adapter)
  probe  automon.training.probe.status(cfg)     (a trained probe in the directory its identity names)
  eval   automon.evaluation.status.status(cfg)  (recorded identity: config, build, adapter hashes)
which are what data_build/build.py, train/sft.py, train/probe.py and eval/holdout.py themselves act on.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from automon.config.pipeline import PipelineConfig
from automon.data.build import BuildError
from automon.data.status import status as data_status
from automon.errors import one_line
from automon.evaluation import USER_ERRORS as EVAL_ERRORS
from automon.evaluation.identity import as_config as eval_config
from automon.evaluation.status import status as eval_status
from automon.pipeline.compose import CompositionError, compose
from automon.sources import SourceError
from automon.stage_status import Status
from automon.training import USER_ERRORS as TRAIN_ERRORS
from automon.training.cli import preflight
from automon.training.identity import validate as validate_train
from automon.training.probe import status as probe_status
from automon.training.status import status as train_status


class PipelineError(RuntimeError):
    """Something the user must fix; the message says what."""


@dataclass(frozen=True)
class StageSpec:
    script: str                                 # entry point, relative to the repository
    config_name: str                            # its primary config in conf/
    status: Callable[[DictConfig], Status]      # the stage's own currency check
    user_errors: tuple                          # exceptions that are the user's to fix (message only)
    validate: Callable[[DictConfig], Any]       # typed checks the stage runs before it starts


def _validate_train(cfg: DictConfig) -> None:
    validate_train(OmegaConf.to_object(cfg))


def _validate_eval(cfg: DictConfig) -> None:
    eval_config(cfg)  # the typed config plus its stress= names


STAGE_SPECS = {
    "build": StageSpec("data_build/build.py", "build", data_status, (BuildError, SourceError), OmegaConf.to_object),
    "train": StageSpec("train/sft.py", "sft", train_status, TRAIN_ERRORS, _validate_train),
    "eval": StageSpec("eval/holdout.py", "holdout", eval_status, EVAL_ERRORS, _validate_eval),
    # a probe is trained like an adapter, by its own entry (train/probe.py), into the directory its identity names
    "probe": StageSpec("train/probe.py", "probe", probe_status, EVAL_ERRORS, OmegaConf.to_object),
}


@dataclass
class StageRun:
    """One stage invocation: its overrides, the config they compose to, the command that runs it."""
    stage: str            # build | train | probe | eval
    name: str             # what the log lines call it: build, train safety_qa, eval
    overrides: list[str]
    cfg: DictConfig

    @property
    def spec(self) -> StageSpec:
        return STAGE_SPECS[self.stage]

    def command(self, py: str, repo: Path, *extra: str) -> list[str]:
        return [py, str(repo / self.spec.script), *self.overrides, *extra]

    def status(self) -> Status:
        try:
            return self.spec.status(self.cfg)
        except self.spec.user_errors as e:
            raise PipelineError(f"{self.name}: {e}") from None


def compose_stage(stage: str, name: str, overrides: list[str], py: str, repo: Path) -> StageRun:
    """Compose (inside compose.hydra_for) and validate; a config the stage would reject stops the
    pipeline here, with the command a user could type to see the same error."""
    spec = STAGE_SPECS[stage]
    cmd = shlex.join([py, str(repo / spec.script), *overrides])
    if stage == "train":  # train/sft.py checks its overrides before Hydra, with the valid keys listed
        problems = preflight(overrides, repo / "conf")
        if problems:
            raise PipelineError(f"{spec.script} rejects its configuration: {' | '.join(problems)} (its command: {cmd})")
    try:
        cfg = compose(spec.config_name, overrides)
        spec.validate(cfg)
    except (CompositionError, OmegaConfBaseException, *spec.user_errors) as e:
        raise PipelineError(f"{spec.script} rejects its configuration: {one_line(str(e))} (its command: {cmd})") from None
    return StageRun(stage, name, list(overrides), cfg)


# ---------------------------------------------------------------- the overrides per stage

def hydra_value(value: Any) -> str:
    """`value` as the right-hand side of a Hydra override that means exactly it: as it is when Hydra reads
    it back unchanged (every plain path), else quoted. A non-ASCII pipeline name (quoted for the pipeline's
    own command line) once reached the stages unquoted: output_dir=runs/ñame/x, which Hydra cannot parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    v = str(value)
    parser = OverridesParser.create()
    try:
        if parser.parse_override(f"k={v}").value() == v:
            return v
    except Exception:  # noqa: BLE001 - Hydra's grammar errors: quote it
        pass
    if "'" not in v:
        return f"'{v}'"
    if '"' not in v:
        return f'"{v}"'
    return "'" + v.replace("'", "\\'") + "'"


def build_overrides(c: PipelineConfig, sources_root: str | None) -> list[str]:
    ov = [f"out={hydra_value(c.build.out)}",
          f"sources.root={hydra_value(sources_root) if sources_root is not None else 'null'}"]
    ov += [f"test.{k}={v}" for k, v in c.build.test.items()]
    return ov + list(c.build.args) + list(c.build.extra_args)


def entry_dirname(entry: str) -> str:
    """Run directory name for a subsets entry: `safety_qa`, `all`, `[a,b]` -> `a+b`."""
    e = entry.strip()
    if e.startswith("[") and e.endswith("]"):
        return "+".join(x.strip() for x in e[1:-1].split(",") if x.strip())
    return e


def _train_shared(c: PipelineConfig) -> list[str]:
    """What every training run of the pipeline gets, locally or through a launcher."""
    return [f"model={c.monitor.model}", f"prompt={c.monitor.prompt}", f"data.dir={hydra_value(c.build.out)}",
            *c.train.args, *c.train.extra_args]


def train_overrides(c: PipelineConfig, entry: str) -> list[str]:
    return [f"subset={entry}", f"output_dir={hydra_value(Path(c.train.runs_dir) / entry_dirname(entry))}",
            *_train_shared(c)]


def train_multirun_cmd(c: PipelineConfig, py: str, repo: Path, entries: list[str], overwrite: bool) -> list[str]:
    """One Hydra multirun through c.train.launcher; job `e` composes to train_overrides(c, e):
    output_dir resolves to runs_dir/<subset> in each job."""
    bad = [e for e in entries if entry_dirname(e) != e]
    if bad:
        raise PipelineError(f"train.launcher runs one job per subset name; {bad} are lists: give them "
                            "their own conf/subset/<name>.yaml, or leave train.launcher=null")
    cmd = [py, str(repo / STAGE_SPECS["train"].script), "-m", f"subset={','.join(entries)}",
           f"hydra/launcher={c.train.launcher}", f"hydra.sweep.dir={hydra_value(c.train.runs_dir)}",
           "hydra.sweep.subdir=.jobs/${hydra.job.num}",
           "output_dir=${hydra:sweep.dir}/${hydra:runtime.choices.subset}",
           *_train_shared(c), *c.train.launcher_args]
    return cmd + (["overwrite=true"] if overwrite else [])


def eval_overrides(c: PipelineConfig, also: str | None = None) -> list[str]:
    """The main evaluation's overrides, or those of the further evaluation `also` (eval.also)."""
    main = [f"sweep_dir={hydra_value(c.train.runs_dir)}", f"model={c.monitor.model}", f"prompt={c.monitor.prompt}",
            f"backend={c.eval.backend}", f"data.dir={hydra_value(c.build.out)}", f"output_dir={hydra_value(c.eval.out)}",
            *c.eval.args, *c.eval.extra_args]
    if also is None:
        return main
    extra = [f"output_dir={hydra_value(f'{c.eval.out}/{also}')}", *c.eval.also[also]]
    if any(o.startswith("backend=") and o != f"backend={c.eval.backend}" for o in extra):
        # another backend: the main's backend.<key> settings configure the main's, which the entry's may lack
        main = [o for o in main if not o.lstrip("+~").startswith("backend.")]
    return merge_overrides(main, extra)


# The settings that make a probe's identity (automon.probes.fit.probe_identity), read by train/probe.py
# at the top level and by an evaluation as backend.<key>.
PROBE_KEYS = ("features", "cap", "seed", "layer", "pooling", "max_length", "batch_size", "cache_dir")


def probe_overrides(eval_cfg: DictConfig, subset: str) -> list[str]:
    """train/probe.py's overrides for the probe that an evaluation with backend=probe scores as `subset`:
    the same features, encoder settings, cap, seed and build, so the evaluation loads it instead of fitting it."""
    b = eval_cfg.backend
    return [f"train_subset={subset}", f"model={eval_cfg.model.name}", f"data.dir={hydra_value(b.data_dir)}",
            *(f"{k}={'null' if b[k] is None else hydra_value(b[k])}" for k in PROBE_KEYS)]


def merge_overrides(base: list[str], extra: list[str]) -> list[str]:
    """`base` then `extra`, leaving out each override of `base` whose key `extra` sets again (Hydra
    refuses two values for one config group, e.g. backend=hf and backend=probe)."""
    def key(o: str) -> str:
        return o.split("=", 1)[0].lstrip("+~")

    again = {key(o) for o in extra}
    return [o for o in base if key(o) not in again] + list(extra)


def cpu_threads(parallel: int) -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, n // max(1, parallel))
