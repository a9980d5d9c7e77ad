"""The training speed options as config keys (CPU side): the pack budget per step (train.tokens_per_step: a
number, 16k/32k/64k/128k, or null = the device's default), gradient checkpointing (trainer.gradient_checkpointing:
true/false/auto), Liger kernels (trainer.liger) and variable-length attention (trainer.attn_implementation) for
the peft trainer. Each is checked at start-up, refused with one message where it cannot apply, and the device's
default budget is part of a run's identity as the number trained with."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf
from support import one_error_line, run_sft
from test_packing import _cfg

from automon.config.train import CPU_TOKENS_PER_STEP, token_budget
from automon.stage_status import Currency
from automon.training import rundir as rd
from automon.training import sft_args, trainers
from automon.training.errors import TrainConfigError
from automon.training.identity import resolve, run_status, validate


def _typed(*overrides: str):
    return OmegaConf.to_object(_cfg("model=tiny", "subset=sg_qa", *overrides))


# ------------------------------------------------------------------ train.tokens_per_step

@pytest.mark.parametrize("value, tokens", [("16k", 16384), ("32k", 32768), ("64k", 65536), ("128k", 131072),
                                           ("4096", 4096), ("256", 256), ("1024k", 1 << 20), ("8K", 8192)])
def test_a_budget_is_tokens_or_k_tokens(value, tokens):
    c = _typed(f"train.tokens_per_step={value}")
    validate(c)
    assert token_budget(c.train.tokens_per_step) == tokens


@pytest.mark.parametrize("value", ["abc", "32kb", "2M", "100", "-7", "''", "0", "1025k", "16.5k"])
def test_an_unknown_or_invalid_budget_is_one_clear_error(value):
    with pytest.raises(TrainConfigError) as e:
        validate(_typed(f"train.tokens_per_step={value}"))
    msg = str(e.value)
    assert "is not a token budget (train.tokens_per_step)" in msg and "16k, 32k, 64k, 128k" in msg, msg
    assert f"null (the device's default: {CPU_TOKENS_PER_STEP} tokens on CPU" in msg


def test_16k_and_16384_are_one_run(small_build, tmp_path):
    """config.yaml records the number: the spelling of a budget is not part of a run's identity."""
    a = resolve(_cfg(f"data.dir={small_build}", f"output_dir={tmp_path}", "train.tokens_per_step=16k"))
    b = resolve(_cfg(f"data.dir={small_build}", f"output_dir={tmp_path}", "train.tokens_per_step=16384"))
    assert a.resolved == b.resolved and a.resolved["train"]["tokens_per_step"] == 16384
    assert a.cfg.train.tokens_per_step == 16384 and a.tokens_per_step_asked == "16k"


def test_the_default_budget_is_per_device(small_build, tmp_path, monkeypatch):
    """null: 4,096 on CPU (never more than max_seq_length), max_seq_length on a CUDA GPU; unpacked runs have none."""
    base = [f"data.dir={small_build}", f"output_dir={tmp_path / 'r'}"]
    assert resolve(_cfg(*base)).resolved["train"]["tokens_per_step"] == 4096
    assert resolve(_cfg(*base, "train.max_seq_length=1024")).resolved["train"]["tokens_per_step"] == 1024
    assert resolve(_cfg(*base, "train.packing=false")).resolved["train"]["tokens_per_step"] is None
    monkeypatch.setattr(trainers, "cuda_available", lambda: True)
    assert resolve(_cfg(*base)).resolved["train"]["tokens_per_step"] == 32768
    assert resolve(_cfg(*base, "model.max_position_embeddings=8192")).resolved["train"]["tokens_per_step"] == 8192
    assert sft_args.default_tokens_per_step(32768, on_cuda=False) == CPU_TOKENS_PER_STEP


def _recorded_run(run, r, device: str | None, status: str = "running", budget="as resolved") -> None:
    """A run dir as train/sft.py leaves it after its first segment started on `device` (no model run)."""
    cfg = json.loads(json.dumps(r.resolved))
    if budget != "as resolved":
        cfg["train"]["tokens_per_step"] = budget
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    info = {"format": rd.RUN_FORMAT, "status": status, "subsets": r.subsets, "data_manifest_hash": r.build.manifest_hash}
    if device:
        info["device"] = device
    (run / "run.json").write_text(json.dumps(info))


def test_a_run_keeps_the_budget_of_the_device_it_started_on(small_build, tmp_path, monkeypatch):
    """The pipeline asks on one machine about a run trained on another, and a run may resume on another device:
    null resolves by the device the run started on, so a GPU run (32k) is that run on a CPU machine too."""
    run = tmp_path / "run"
    args = [f"data.dir={small_build}", f"output_dir={run}"]
    monkeypatch.setattr(trainers, "cuda_available", lambda: True)
    on_gpu = resolve(_cfg(*args))
    _recorded_run(run, on_gpu, "cuda")
    monkeypatch.setattr(trainers, "cuda_available", lambda: False)
    here = resolve(_cfg(*args))                           # a CPU machine asks
    assert here.resolved["train"]["tokens_per_step"] == 32768 and run_status(here).state is Currency.RESUMABLE
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(info, device="cpu", started_on="cuda")))   # resumed on CPU
    assert resolve(_cfg(*args)).resolved["train"]["tokens_per_step"] == 32768
    # overwrite=true starts a new run, on this machine's default
    assert resolve(_cfg(*args, "overwrite=true")).resolved["train"]["tokens_per_step"] == 4096


def test_a_run_recorded_with_null_before_the_cpu_default_is_the_run_of_max_seq_length(small_build, tmp_path,
                                                                                       monkeypatch):
    """Before the per-device default, null packed max_seq_length tokens on every device. A GPU run of that time
    is still the default's run; a CPU one trained 32k packs, not the CPU default's 4k: another run, and so is
    said (like the packed default against a run from before packing)."""
    args = lambda run: [f"data.dir={small_build}", f"output_dir={run}"]  # noqa: E731
    for device, want in (("cuda", Currency.RESUMABLE), ("cpu", Currency.STALE)):
        run = tmp_path / device
        r = resolve(_cfg(*args(run)))
        _recorded_run(run, r, device, budget=None)
        st = run_status(resolve(_cfg(*args(run))))
        assert st.state is want, (device, st)
        if want is Currency.STALE:
            assert "train.tokens_per_step: None -> 4096" in st.reason
            assert run_status(resolve(_cfg(*args(run), "train.tokens_per_step=32768"))).state is Currency.RESUMABLE


# ------------------------------------------------------------------ trainer.gradient_checkpointing

@pytest.mark.parametrize("value, want", [("true", "true"), ("false", "false"), ("auto", "auto"), ("null", "auto"),
                                         ("AUTO", "auto")])
def test_gradient_checkpointing_is_true_false_or_auto(value, want):
    from automon.config.train import checkpointing_choice

    c = _typed(f"trainer.gradient_checkpointing={value}")
    validate(c)
    assert checkpointing_choice(c.trainer.gradient_checkpointing) == want


@pytest.mark.parametrize("value", ["maybe", "''", "on"])
def test_gradient_checkpointing_refuses_other_values(value):
    with pytest.raises(TrainConfigError, match="trainer.gradient_checkpointing=.* use true, false or auto"):
        validate(_typed(f"trainer.gradient_checkpointing={value}"))


def test_auto_checkpointing_is_off_on_cpu_and_off_on_a_gpu_only_below_a_recorded_bound(monkeypatch):
    c = _typed("trainer=peft", "train.tokens_per_step=32k")
    assert _typed().trainer.gradient_checkpointing == "auto"            # the default
    gc = sft_args.gradient_checkpointing
    assert gc(c, on_cuda=False) is False
    assert gc(c, on_cuda=True, card_gib=80) is True                      # nothing recorded: on, as before
    monkeypatch.setitem(sft_args.NO_CHECKPOINTING_FITS, ("peft", "tiny"), 32768)
    assert gc(c, on_cuda=True, card_gib=80) is False                     # the budget fits without it
    assert gc(c, on_cuda=True, card_gib=24) is True                      # ... but not on a small card
    assert gc(_typed("trainer=peft", "train.tokens_per_step=64k"), on_cuda=True, card_gib=80) is True
    assert gc(_typed("trainer=unsloth", "train.tokens_per_step=32k"), on_cuda=True, card_gib=80) is True
    unpacked = _typed("trainer=peft", "train.packing=false", "train.batch_size=2", "train.max_seq_length=16384")
    assert gc(unpacked, on_cuda=True, card_gib=80) is False              # 2 x 16k tokens a micro-batch
    assert gc(_typed("trainer=peft", "train.tokens_per_step=32k", "trainer.gradient_checkpointing=true"),
              on_cuda=False) is True                                     # as given
    assert gc(_typed("trainer=peft", "trainer.gradient_checkpointing=false"), on_cuda=True, card_gib=80) is False


def test_trl_gets_the_resolved_checkpointing_and_liger(tmp_path):
    args = sft_args.make_sft_args(_typed("trainer.gradient_checkpointing=true"), tmp_path, on_cuda=False, report_to=[])
    assert args.gradient_checkpointing is True and args.use_liger_kernel is False
    args = sft_args.make_sft_args(_typed(), tmp_path, on_cuda=False, report_to=[])
    assert args.gradient_checkpointing is False
    args = sft_args.make_sft_args(_typed("trainer.liger=true"), tmp_path, on_cuda=False, report_to=[])
    assert args.use_liger_kernel is True            # (refused on CPU before this: check_kernel_options)


def test_kernel_keys_are_not_part_of_a_runs_identity():
    """The same function with other memory use and rounding: a run resumes under another kernel choice."""
    a = OmegaConf.to_container(_cfg(), resolve=True)
    b = OmegaConf.to_container(_cfg("trainer.gradient_checkpointing=false", "trainer.attn_implementation=eager",
                                    "trainer.liger=true"), resolve=True)
    assert rd.config_diff(a, b) == []


# ------------------------------------------------------------------ trainer.liger, trainer.attn_implementation

def test_an_unknown_attention_is_refused_with_the_valid_ones():
    with pytest.raises(TrainConfigError, match="trainer.attn_implementation='flash' is not a valid value.*"
                                               "sdpa, eager, flex_attention, flash_attention_2"):
        validate(_typed("trainer.attn_implementation=flash"))


@pytest.mark.parametrize("overrides, trainer, cuda, installed, msg", [
    (["trainer.liger=true"], "peft", False, True, "trainer.liger=true needs a CUDA GPU.*set trainer.liger=false on CPU"),
    (["trainer.liger=true"], "peft", True, False, "needs the liger-kernel package.*pip install liger-kernel"),
    (["trainer.liger=true"], "unsloth", True, True, "applies to the peft trainer; this run uses trainer=unsloth"),
    (["trainer=auto", "trainer.liger=true"], "unsloth", True, True, r"trainer=unsloth \(trainer=auto chose it\)"),
    (["trainer.attn_implementation=flex_attention"], "peft", False, True, "FlexAttention has no backward pass on CPU"),
    (["trainer.attn_implementation=flash_attention_2"], "peft", False, True, "flash_attention_2 needs a CUDA GPU"),
    (["trainer.attn_implementation=flash_attention_2"], "peft", True, False, "needs the flash-attn package.*"
                                                                             "flex_attention"),
    (["trainer.attn_implementation=flex_attention"], "unsloth", True, True, "applies to the peft trainer"),
])
def test_a_kernel_option_that_cannot_apply_is_refused_naming_the_fix(overrides, trainer, cuda, installed, msg,
                                                                    monkeypatch):
    monkeypatch.setattr(trainers, "_installed", lambda module: installed)
    with pytest.raises(TrainConfigError, match=msg):
        trainers.check_kernel_options(_typed(*overrides), trainer, cuda)


@pytest.mark.parametrize("overrides", [[], ["trainer.liger=true"], ["trainer.attn_implementation=flex_attention"],
                                       ["trainer.attn_implementation=flash_attention_2", "trainer.liger=true"]])
def test_kernel_options_where_they_apply_pass(overrides, monkeypatch):
    monkeypatch.setattr(trainers, "_installed", lambda module: True)
    trainers.check_kernel_options(_typed(*overrides), "peft", True)
    trainers.check_kernel_options(_typed(), "unsloth", True)
    trainers.check_kernel_options(_typed("trainer.attn_implementation=eager"), "peft", False)


def test_liger_on_cpu_stops_train_sft_before_the_run_dir_is_made(small_build, tmp_path):
    run = tmp_path / "run"
    r = run_sft(f"data.dir={small_build}", "model=tiny", "subset=sg_qa", "trainer.liger=true", "wandb.mode=disabled",
                f"output_dir={run}", timeout=240)
    one_error_line(r, "trainer.liger=true needs a CUDA GPU", "trainer.liger=false")
    assert not run.exists()


# ------------------------------------------------------------------ what a step holds

def test_the_log_says_what_a_step_holds():
    packed = {"packs": 40, "useful_tokens": 160_000, "tokens_per_step": 4096}
    line = trainers.describe_step(packed, 520, 307.7, 2, 1, 30, 3.0)
    assert line == ("an optimizer step holds 1 pack of <= 4096 tokens: 13.0 examples, 4,000 tokens on average; "
                    "30 steps = 0.75 epochs of 520 examples")
    line = trainers.describe_step(None, 520, 300.0, 2, 8, -1, 3.0)
    assert line == ("an optimizer step holds 8 micro-batches of 2 examples: 16 examples, about 4,800 tokens; "
                    "3 epochs = 99 steps of 33 an epoch")


def test_a_pack_budget_of_an_unpacked_run_is_refused():
    """train.packing=false train.tokens_per_step=300 ignored the budget without a word, yet it was part of the
    run's identity (two configs of one run); now refused at config time, naming both keys."""
    with pytest.raises(TrainConfigError) as e:
        validate(_typed("train.packing=false", "train.tokens_per_step=300"))
    assert "train.tokens_per_step=300 is set with train.packing=false" in str(e.value)
    assert "(train.tokens_per_step, train.packing)" in str(e.value)
    validate(_typed("train.packing=false"))  # unset: fine
    validate(_typed("train.tokens_per_step=300"))  # packed: its budget (256 is the floor)
