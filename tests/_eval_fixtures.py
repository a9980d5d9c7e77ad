"""Fixtures for the evaluation tests: synthetic builds over all six subsets, tiny LoRA adapters,
composed holdout configs. Everything is built offline from the project's own code."""

from __future__ import annotations

import os
import random
from functools import lru_cache
from pathlib import Path
from typing import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from automon.adapter_meta import AdapterMeta  # noqa: E402
from automon.data.io import write_build  # noqa: E402
from automon.prompts import FIT_VERSION  # noqa: E402
from automon.schema import SUBSETS, Sample  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar "
          "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def make_sample(split: str, subset: str, k: int, label: int, pair_id: str | None, rng: random.Random,
                long_words: int = 0) -> Sample:
    category, task = SUBSETS[subset]
    sid = f"{split}-{subset}-{k:03d}-{label}"
    request = f"[{sid}] Request about {subset}: {_text(rng, 12)}?"
    flag = f"MISBEHAVIOR-{sid}" if label else f"benign-{sid}"
    response = f"Response {sid}. {_text(rng, 20 + long_words)} {flag} {_text(rng, 8)}."
    return Sample(id=sid, pair_id=pair_id, split=split, category=category, task=task, subset=subset,
                  source=f"synthetic:{sid}", request=request, response=response, label=label,
                  evidence=[flag] if label else [], meta={"recipe": "synthetic"}).validate()


def synthetic_samples(pairs_per_subset: int = 4, train_per_subset: int = 6, seed: int = 0,
                      long_every: int = 0, long_words: int = 0) -> tuple[list[Sample], list[Sample]]:
    """(train, test): test = `pairs_per_subset` twin pairs per subset, train = unpaired, balanced.

    `long_every` > 0 makes every n-th test sample's response `long_words` words longer.
    """
    rng = random.Random(seed)
    train, test = [], []
    for subset in SUBSETS:
        for k in range(pairs_per_subset):
            pid = f"pair-{subset}-{k:03d}"
            for label in (1, 0):
                extra = long_words if long_every and (len(test) % long_every == 0) else 0
                test.append(make_sample("test", subset, k, label, pid, rng, extra))
        for k in range(train_per_subset):
            train.append(make_sample("train", subset, k, k % 2, None, rng))
    return train, test


def make_build(out: Path, pairs_per_subset: int = 4, train_per_subset: int = 6, seed: int = 0, **kw) -> Path:
    train, test = synthetic_samples(pairs_per_subset, train_per_subset, seed, **kw)
    write_build(Path(out), train, test, {"seed": seed, "recipe": "tests/_eval_fixtures.py"}, overwrite=True)
    return Path(out)


@lru_cache(maxsize=1)
def tiny_path() -> str:
    from automon.models.tiny import tiny_qwen3_path

    return str(tiny_qwen3_path())


def make_adapter(out: Path, *, subset: str = "safety_code", seed: int = 0, r: int = 8,
                 prompt: str = "direct_v1", base_model: str = "tiny", pretrained: str = "tiny",
                 enable_thinking: bool = False, prompt_fit: str = FIT_VERSION, write_meta: bool = True) -> Path:
    """A random (non-identity) LoRA adapter on the tiny model, saved like training saves one."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(tiny_path(), dtype=torch.float32)
    cfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, task_type="CAUSAL_LM", init_lora_weights=False,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(base, cfg)
    with torch.no_grad():  # make the adapter clearly change the scores
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    if write_meta:
        AdapterMeta(base_model=base_model, pretrained=pretrained, prompt=prompt,
                    enable_thinking=enable_thinking, subset=subset, data_manifest_hash="0" * 64, lora_rank=r,
                    automon_version="test", prompt_fit=prompt_fit).write(out)
    return out


def compose(overrides: Sequence[str] = ()):
    """conf/holdout.yaml composed with overrides -> HoldoutConfig (runs the schema checks)."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from automon.config.eval import register

    register()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = hcompose(config_name="holdout", overrides=list(overrides))
    return OmegaConf.to_object(cfg)


def cpu_overrides(build: Path, out: Path, *extra: str) -> list[str]:
    return ["model=tiny", "backend=hf", f"data.dir={build}", f"output_dir={out}", "wandb.mode=disabled",
            "progress=false", "bootstrap.n=200", *extra]
