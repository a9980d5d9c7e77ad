"""Every key of every entry point's typed config, tried the way a careless user or a hostile tester
would: a value of the wrong type, an out-of-range value and an empty value. Each must be refused at
start-up, by the checks the entry point runs before any expensive work (composing the config, its typed
checks), with an error the entry point reports as one `error:` line and exit 2 (automon.errors.entry),
never with another exception (a traceback). A value that is fine for a key is listed in ACCEPTED with
the reason (`_accepted`); a new key that is not refused and not listed fails this test.

The probes run in-process (the same compose and checks as the scripts, milliseconds each); a sample of
them runs through the real scripts at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import subprocess
import typing

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from support import CONF, REPO, one_error_line, run_holdout, run_script, run_sft
from automon.errors import ConfigError, UserError

WRONG = "wrong type"
RANGE = "out of range"
EMPTY = "empty"

def _accepted(stage: str, key: str, probe: str) -> str | None:
    """Why (stage, key, probe) may be accepted at start-up, or None (then it must be refused)."""
    rules = [
        (probe == EMPTY and (stage, key) in {("sft", "model.revision"), ("holdout", "model.revision"),
                                             ("sft", "wandb.entity"), ("holdout", "wandb.entity")},
         "empty is the default: the hub's main revision, your default wandb entity"),
        (probe == EMPTY and (stage, key) == ("build", "wordings.safety_annotations"),
         "empty is the default: no safety annotations"),
        (probe == RANGE and key == "ood.layer", "a negative layer counts from the last (-1: the last)"),
        (probe == EMPTY and (stage, key) in {("holdout", "detectors"), ("holdout", "far_targets"),
                                             ("holdout", "stress")},
         "the default: no OOD detectors / no extra FAR operating points / no stressed sets"),
        (probe == EMPTY and stage == "pipeline" and (key == "force" or key.endswith("args")),
         "the default: nothing forced, no extra overrides for a stage"),
        (stage == "build" and key.startswith("policy."),
         "used by generator=policy only, and checked then (data.check._check_policy)"),
        (stage == "build" and key.startswith("sg_code."),
         "used when sg_code is built, and checked then (data.check.check_config)"),
    ]
    for ok, why in rules:
        if ok:
            return why
    return None


def _leaves(schema: type, prefix: str = "") -> list[tuple[str, typing.Any]]:
    """(dotted key, type) of every leaf of a dataclass schema; dict-typed keys are maps, not leaves."""
    out = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        tp = hints[f.name]
        if typing.get_origin(tp) is typing.Union:
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        key = prefix + f.name
        if dataclasses.is_dataclass(tp):
            out += _leaves(tp, key + ".")
        elif typing.get_origin(tp) in (dict, typing.Dict) or tp is dict:
            continue
        else:
            out.append((key, tp))
    return out


def _probes(tp) -> dict[str, str]:
    """probe name -> override value for a leaf of type `tp`."""
    origin = typing.get_origin(tp)
    if origin in (list, typing.List):
        return {WRONG: "{a: 1}", EMPTY: "[]"}
    if tp is bool:
        return {WRONG: "maybe", EMPTY: "''"}
    if tp is int:
        return {WRONG: "abc", RANGE: "-7", EMPTY: "''"}
    if tp is float:
        return {WRONG: "abc", RANGE: "nan", EMPTY: "''"}
    return {WRONG: "[a,b]", EMPTY: "''"}


def _start_up(stage: str, overrides: list[str], composer: "_Composer | None" = None) -> None:
    """What the stage's entry point runs before any expensive work; raises what it would report.
    `composer` stands in for Hydra's compose (the same config, see _Composer); None: compose itself."""
    def composed(name: str):
        return composer(overrides) if composer else compose(config_name=name, overrides=overrides)

    if stage == "sft":
        from automon.training.cli import preflight
        from automon.training.errors import TrainConfigError
        from automon.training.identity import validate

        problems = preflight(overrides, CONF)
        if problems:
            raise TrainConfigError(problems[0])
        validate(OmegaConf.to_object(composed("sft")))
    elif stage == "holdout":
        OmegaConf.to_object(composed("holdout"))
    elif stage == "build":
        from automon.data.check import check_config

        check_config(composed("build"))  # run_build's first step
    elif stage == "pipeline":
        from automon.pipeline.checks import validate

        validate(OmegaConf.to_object(composed("pipeline")))


class _Composer:
    """compose(config_name=stage, overrides=BASE[stage] + [probe]) at a fraction of its cost (a compose
    is 0.1-0.2 s, almost all of it building the defaults list; the walk makes about 500): the base is
    composed once, and a probe of a plain key is applied to a copy of it by the function compose itself
    applies command-line values with, after the defaults list (ConfigLoaderImpl._apply_overrides_to_config,
    hydra 1.3). A probe of a config group (model=..., subset=...) changes the defaults list: composed
    in full. test_the_walks_shortcut_composes_what_compose_does checks the two agree."""

    def __init__(self, stage: str):
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.stage = stage
        self.base = compose(config_name=stage, overrides=BASE[stage])
        self.parser = OverridesParser.create()
        self.repo = GlobalHydra.instance().config_loader().repository

    def __call__(self, overrides: list[str]):
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        probe = overrides[len(BASE[self.stage]):]
        parsed = self.parser.parse_overrides(probe)
        if overrides[:len(BASE[self.stage])] != BASE[self.stage] or any(
                o.package is not None or o.is_delete() or o.is_add() or o.is_force_add()
                or self.repo.group_exists(o.key_or_group) for o in parsed):
            return compose(config_name=self.stage, overrides=overrides)
        cfg = copy.deepcopy(self.base)
        ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
        return cfg


BASE = {  # a valid start for each entry point (the rest of its defaults)
    "sft": ["model=tiny", "subset=sg_qa", "wandb.mode=disabled"],
    "holdout": ["model=tiny", "backend=hf", "wandb.mode=disabled"],
    "build": [],
    "pipeline": ["experiment=smoke"],
}


def _schema(stage: str) -> type:
    if stage == "sft":
        from automon.config.train import SFTConfig
        return SFTConfig
    if stage == "holdout":
        from automon.config.eval import HoldoutConfig
        return HoldoutConfig
    if stage == "build":
        from automon.config.build import BuildConfig
        return BuildConfig
    from automon.config.pipeline import PipelineConfig
    return PipelineConfig


def _register() -> None:
    from automon.config import build, eval, pipeline, train

    for m in (build, train, eval, pipeline):
        m.register()


USER = (UserError, ConfigError, HydraException, OmegaConfBaseException)


def _verdict(stage: str, key: str, value: str, composer: _Composer | None = None) -> str | None:
    """None when refused as a user error; 'accepted' when the start-up checks let it through."""
    from automon.training import USER_ERRORS as TRAIN
    from automon.evaluation import USER_ERRORS as EVAL
    from automon.pipeline.stages import PipelineError

    try:
        _start_up(stage, [*BASE[stage], f"{key}={value}"], composer)
    except (*USER, *TRAIN, *EVAL, PipelineError):
        return None
    return "accepted"


@pytest.mark.parametrize("stage", ["sft", "holdout", "build", "pipeline"])
def test_every_key_refuses_a_wrong_type_an_out_of_range_and_an_empty_value(stage, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative output paths, if any were probed, land here
    _register()
    accepted, crashed = [], []
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        _start_up(stage, BASE[stage])  # the base itself is valid
        composer = _Composer(stage)
        for key, tp in _leaves(_schema(stage)):
            for probe, value in _probes(tp).items():
                try:
                    verdict = _verdict(stage, key, value, composer)
                except Exception as e:  # noqa: BLE001 - a traceback at the entry point
                    crashed.append(f"{key}={value} ({probe}): {type(e).__name__}: {str(e)[:200]}")
                    continue
                if verdict and not _accepted(stage, key, probe):
                    accepted.append(f"{key}={value} ({probe})")
    assert not crashed, "\n".join(crashed)
    assert not accepted, f"{stage}: accepted at start-up:\n" + "\n".join(accepted)


def _outcome(make) -> str:
    """The config `make()` gives, as YAML, or the error it raises (type and message)."""
    try:
        return OmegaConf.to_yaml(make())
    except Exception as e:  # noqa: BLE001 - compared, not judged
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("stage", ["sft", "holdout", "build", "pipeline"])
def test_the_walks_shortcut_composes_what_compose_does(stage, tmp_path, monkeypatch):
    """_Composer against Hydra's compose on a sample of the walk's probes (each probe kind, plain keys
    and config groups): the same config, or the same error."""
    monkeypatch.chdir(tmp_path)
    _register()
    probes = [f"{key}={value}" for key, tp in _leaves(_schema(stage)) for value in _probes(tp).values()]
    sample = random.Random(0).sample(probes, 12) + [p for p in probes if p.split("=")[0] in ("subset", "model")][:2]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        composer = _Composer(stage)
        for probe in sample:
            overrides = [*BASE[stage], probe]
            assert _outcome(lambda: composer(overrides)) == \
                _outcome(lambda: compose(config_name=stage, overrides=overrides)), probe


def _script(script: str, *overrides: str) -> subprocess.CompletedProcess:
    return run_script(REPO / script, *overrides, timeout=240, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


def test_a_sample_of_the_probes_through_the_real_scripts_is_one_error_line(tmp_path):
    """The in-process verdicts above are what the scripts report: one `error:` line, exit 2, in seconds."""
    one_error_line(run_sft("model=tiny", "subset=sg_qa", "train.lr=nan", f"output_dir={tmp_path / 'r'}"),
                   "train.lr=nan is not a finite number")
    one_error_line(run_sft("model=tiny", "subset=sg_qa", "trainer.attn_implementation=", f"output_dir={tmp_path / 'r'}"),
                   "trainer.attn_implementation= is empty")
    one_error_line(run_holdout("model=tiny", "backend=hf", "ood.cap=-7", f"output_dir={tmp_path / 'o'}"),
                   "ood.cap must be >= 4")
    one_error_line(_script("data_build/build.py", "audit.z_alpha=nan", f"out={tmp_path / 'b'}"),
                   "audit.z_alpha=nan is out of range")
    r = _script("pipeline.py", "experiment=smoke", "eval.out=")
    assert r.returncode == 2 and "eval.out= is empty" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not any(p.exists() for p in (tmp_path / "r", tmp_path / "o", tmp_path / "b"))
