"""conf/sft.yaml and its groups compose; unknown subsets are caught and a misspelt key gets the list of
the valid ones (that it fails at all: tests/config/test_typos.py); TRL args build."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from support import REPO, run_sft
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from automon.config.train import SFTConfig, register
from automon.schema import SUBSETS
from automon.training import rundir as rd
from automon.training.cli import group_options, preflight
from automon.training.errors import TrainConfigError
from automon.training.identity import run_dir_for, validate

CONF = REPO / "conf"
register()


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(config_name="sft", overrides=list(overrides))


def _typed(*overrides: str) -> SFTConfig:
    return OmegaConf.to_object(_compose(*overrides))


def test_every_group_option_composes_and_validates():
    combos = [(s, "tiny", "direct_v1", "peft") for s in group_options("subset")]
    models = [m for m in group_options("model") if m != "api"]  # api: evaluation-only, rejected below
    combos += list(itertools.product(["all"], models, group_options("prompt"), group_options("trainer")))
    for subset, model, prompt, trainer in combos:
        c = _typed(f"subset={subset}", f"model={model}", f"prompt={prompt}", f"trainer={trainer}")
        validate(c)
        names = rd.subset_names(c.subset.include)
        assert names == (list(SUBSETS) if subset == "all" else [subset])
        assert c.model.name == model and c.prompt.name == prompt and c.trainer.name == trainer


def test_subset_list_and_leave_one_out():
    c = _typed("subset=[sg_code,safety_qa]")
    names = rd.subset_names(c.subset.include)
    assert names == ["safety_qa", "sg_code"] and rd.subset_label(names) == "safety_qa+sg_code"
    c = _typed("subset=all", "subset.include.sg_code=false")
    assert rd.subset_names(c.subset.include) == [s for s in SUBSETS if s != "sg_code"]
    assert rd.subset_label(SUBSETS) == "all"


def test_run_dir_is_derived_from_identity():
    c = _typed("subset=all", "model=qwen3_8b", "prompt=evidence_v1", "train.seed=3")
    assert run_dir_for(c, "all") == Path("runs/all__qwen3_8b__evidence_v1__seed3")
    assert run_dir_for(_typed("output_dir=/x/y"), "all") == Path("/x/y")


def test_unknown_subset_in_include_is_rejected_with_the_valid_list():
    c = _typed("+subset.include.nope=true")
    with pytest.raises(TrainConfigError, match="unknown subset 'nope'; valid subsets: safety_qa"):
        rd.subset_names(c.subset.include)
    with pytest.raises(TrainConfigError, match="no subset selected"):
        rd.subset_names({"safety_qa": False})


def test_preflight_names_unknown_subsets_and_options_and_lists_the_valid_keys():
    assert preflight(["subset=safety_code", "model=tiny", "train.lr=1e-3", "train.lora.r=8", "--cfg", "job",
                      "subset.include.sg_qa=true", "hydra.run.dir=.", "+foo=1", "subset=[safety_qa,sg_code]",
                      "wandb.mode=online", "output_dir=runs/x"], CONF) == []
    (p,) = preflight(["subset=nope"], CONF)
    assert "unknown subset 'nope'" in p and "safety_qa" in p and "all" in p
    (p,) = preflight(["subset=[safety_qa,bogus]"], CONF)
    assert "'bogus'" in p
    (p,) = preflight(["train.lora.rank=1"], CONF)
    assert "unknown config key 'train.lora.rank'" in p and "valid keys under train.lora: r, alpha" in p
    (p,) = preflight(["model=gpt5"], CONF)
    assert "unknown model option 'gpt5'" in p and "qwen3_8b" in p


@pytest.mark.parametrize("bad,msg", [
    ("train.lr=0", "train.lr must be > 0"),
    ("train.lora.targets=[q_proj,lm_head]", "must not include lm_head"),
    ("prompt.name=direct_v9", "unknown prompt 'direct_v9'; choose prompt=<name>"),
    ("wandb.mode=sometimes", "wandb.mode must be one of"),
    ("train.max_seq_length=100", "max_seq_length must be >= 256"),
    ("model.pretrained=api", "is a monitor behind an API"),
    ("train.lr=inf", "train.lr=inf is not a finite number"),  # trained every weight to NaN, exit 0
    ("train.lr=nan", "train.lr=nan is not a finite number"),
    ("train.epochs=inf", "train.epochs=inf is not a finite number"),
    ("train.seed=-1", "train.seed=-1 is out of range"),
    ("train.lr_scheduler=bogus", "train.lr_scheduler='bogus' is not a valid value.*cosine"),
    ("train.lora.targets=[nope_proj]", r"names \['nope_proj'\].*q_proj"),
])
def test_validate_rejects_bad_values(bad, msg):
    with pytest.raises(TrainConfigError, match=msg):
        validate(_typed(bad))


def test_config_diff_ignores_non_identity_keys():
    a = OmegaConf.to_container(_compose(), resolve=True)
    b = OmegaConf.to_container(_compose("wandb.mode=disabled", "train.logging_steps=1", "data.dir=/elsewhere"),
                               resolve=True)
    assert rd.config_diff(a, b) == []
    c = OmegaConf.to_container(_compose("train.lr=3e-4"), resolve=True)
    assert rd.config_diff(a, c) == ["train.lr: 0.0001 -> 0.0003"]


@pytest.mark.parametrize("overrides", [
    (), ("model=tiny", "trainer=peft", "train.max_steps=5"),
    ("subset=all", "model=qwen3_8b", "prompt=evidence_v1", "train.group_by_length=false"),
    ("train.packing=false",), ("train.packing=false", "train.grad_accum=3")])
def test_trl_sft_config_builds_on_cpu(tmp_path, overrides):
    from automon.training.sft_args import make_sft_args

    c = _typed(*overrides)
    args = make_sft_args(c, tmp_path, on_cuda=False, report_to=[])
    # TRL never packs: automon does (train.packing), one pack per micro-batch
    assert args.use_cpu and not args.bf16 and args.max_length is None and not args.packing
    if c.train.packing:
        assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 1)
    else:  # as before packing: 2 x 8 unless set
        assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == \
            (c.train.batch_size, c.train.grad_accum or 8)
    assert args.output_dir == str(tmp_path / "checkpoints")


@pytest.mark.parametrize("overrides", [
    ("subset=safety_code",),
    ("subset=all", "model=qwen3_8b", "prompt=evidence_v1"),
    ("subset=sg_code", "model=tiny", "data.dir=data/builds/default", "train.max_steps=30", "output_dir=runs/x"),
])
def test_cli_forms_compose(overrides):
    r = run_sft(*overrides, "--cfg", "job", timeout=60)
    assert r.returncode == 0, r.stderr
    cfg = OmegaConf.create(r.stdout)
    assert cfg.subset.include and cfg.train.lora.r == 32


def test_cli_unknown_subset_and_typo_exit_2():
    r = run_sft("subset=nope", timeout=60)
    assert r.returncode == 2 and "unknown subset 'nope'" in r.stderr and "sg_code" in r.stderr
    r = run_sft("train.lrr=1", timeout=60)
    assert r.returncode == 2 and "unknown config key 'train.lrr'" in r.stderr and "max_seq_length" in r.stderr
    r = run_sft("train.lrr=1", "model=gpt5", timeout=60)  # two typos: one line naming both
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and line.startswith("error: 2 problems in the command line: ")
    assert "'train.lrr'" in line and "'gpt5'" in line


def test_lr_schedulers_offered_are_transformers_names():
    from transformers.trainer_utils import SchedulerType

    from automon.config.train import LR_SCHEDULERS

    assert set(LR_SCHEDULERS) <= {s.value for s in SchedulerType}


def test_wandb_online_without_a_key_and_an_unwritable_wandb_dir_fail_at_start_up(tmp_path, monkeypatch):
    """Both once failed after the model loaded (wandb.init: a prompt or a traceback)."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(TrainConfigError, match="wandb.mode=online needs a wandb API key"):
        validate(_typed("wandb.mode=online"))
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    validate(_typed("wandb.mode=online"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(TrainConfigError, match="cannot write in wandb.dir="):
        validate(_typed(f"wandb.dir={afile}/w"))
    validate(_typed(f"wandb.dir={afile}/w", "wandb.mode=disabled"))  # not used: not checked
    r = run_sft("subset=sg_qa", "wandb.mode=online", f"output_dir={tmp_path / 'r'}", timeout=120,
                env={"WANDB_API_KEY": None, "NETRC": str(tmp_path / "no-netrc")})
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert r.returncode == 2 and "Traceback" not in r.stderr and "needs a wandb API key" in line, r.stderr
