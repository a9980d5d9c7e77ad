"""A typo in any entry point's configuration fails when the config is composed, before any work,
with a message that names what was misspelt. The one place this is tested, for every entry point:

  data_build/build.py (conf/build.yaml), data_build/audit.py (audit.yaml), train/sft.py (sft.yaml),
  eval/holdout.py (holdout.yaml: its backends and its OOD settings too), pipeline.py (pipeline.yaml).

- a misspelt key on the command line (`train.lrr=1`): Hydra's message names the full key, and
  OmegaConf's (its cause) the schema section it is not in;
- a key of another backend is a typo for this one;
- a misspelt key inside an option file (conf/<group>/<option>.yaml): the message names the file and
  the key;
- a misspelt option (`model=gpt5`): the message names it and lists the options there are.

What the command lines do with these errors (exit status 2, one `error:` line, train/sft.py's list of
the valid keys) is tested with each script.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import fields
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from support import CONF
from automon.backends import BACKENDS


def _compose(config_name: str, overrides: list[str], conf: Path = CONF):
    """`config_name` composed as its entry point composes it, converted to its schema's objects."""
    from hydra import compose, initialize_config_dir

    from automon.config import build, eval, pipeline, train

    for schema in (build, train, eval, pipeline):
        schema.register()
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return OmegaConf.to_object(compose(config_name=config_name, overrides=overrides))


# Overrides a backend needs to compose in eval/holdout.py (a backend not listed needs none).
BACKEND_NEEDS = {"hf": ["model=tiny"], "openai": ["model=api", "backend.model_name=m"], "probe": ["model=tiny"],
                 "inspect_log": [f"backend.log={Path(__file__).parents[1] / 'backends' / 'data' / 'inspect_mock.eval'}"]}


def _foreign_key(backend: str) -> str:
    """A field another backend's schema has and this one's lacks."""
    own = {f.name for f in fields(BACKENDS[backend])}
    return next(f.name for other in sorted(BACKENDS) for f in fields(BACKENDS[other]) if f.name not in own)


# (entry point's config, overrides it needs, the misspelt key)
KEY_TYPOS = [
    ("build", [], "disjoint.treshold"),
    ("build", [], "test.safty_qa"),           # the per-subset test sizes
    ("build", [], "sg_code.timout_s"),        # a config group's node
    ("build", [], "wordings.versoin"),
    ("audit", ["build=data/builds/default"], "audit.memberz"),
    ("audit", ["build=data/builds/default"], "buidl"),
    ("sft", [], "train.lrr"),
    ("sft", [], "train.lora.rank"),
    ("sft", [], "model.pretraind"),
    ("holdout", [], "bootstrap.nn"),
    ("holdout", [], "ood.shrinkag"),          # the OOD detectors' settings
    ("holdout", [], "prompt.nmae"),
    ("pipeline", [], "train.subsetz"),
    ("pipeline", ["experiment=paper"], "eval.backendd"),
    *(("holdout", [f"backend={b}", *BACKEND_NEEDS.get(b, [])], key)
      for b in sorted(BACKENDS) for key in ("backend.chunk_sise", f"backend.{_foreign_key(b)}")),
]


@pytest.mark.parametrize("config_name, needs, key", KEY_TYPOS,
                         ids=[f"{c}:{' '.join(n)}:{k}".replace(" ", "+") for c, n, k in KEY_TYPOS])
def test_a_misspelt_key_fails_at_compose_time_naming_the_key(config_name, needs, key):
    if "backend=inspect_log" in needs:  # it reads its log at start-up: with inspect-ai only
        pytest.importorskip("inspect_ai")
    _compose(config_name, needs)  # without the typo it composes
    with pytest.raises(ConfigCompositionException, match=f"Could not override '{re.escape(key)}'") as e:
        _compose(config_name, [*needs, f"{key}=1"])
    section, _, leaf = key.rpartition(".")
    assert f"Key '{leaf}' not in '" in str(e.value.__cause__), e.value.__cause__
    if section:
        assert f"full_key: {key}" in str(e.value.__cause__)


# conf/<group>/ -> the entry point's config that composes it
GROUP_CONFIG = {"backend": "holdout", "model": "holdout", "prompt": "holdout", "trainer": "sft",
                "subset": "sft", "wordings": "build", "sg_code": "build", "experiment": "pipeline"}
OPTION_FILES = sorted((p.parent.name, p.stem) for group in GROUP_CONFIG for p in (CONF / group).glob("*.yaml"))


def test_every_option_folder_is_covered():
    assert {p.name for p in CONF.iterdir() if p.is_dir()} - {"hydra"} <= set(GROUP_CONFIG)


def _option_overrides(group: str, option: str) -> list[str]:
    if (group, option) in (("backend", "openai"), ("model", "api")):  # the API model goes with the openai backend
        return ["backend=openai", "model=api", "backend.model_name=m"]
    return [f"{group}={option}", *(BACKEND_NEEDS.get(option, []) if group == "backend" else [])]


@pytest.mark.parametrize("group, option", OPTION_FILES, ids=[f"{g}/{o}" for g, o in OPTION_FILES])
def test_a_misspelt_key_in_an_option_file_fails_at_compose_time(group, option, tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    f = conf / group / f"{option}.yaml"
    f.write_text(f.read_text() + "\nmax_new_tokenz: 12\n")
    with pytest.raises(ConfigCompositionException) as e:
        _compose(GROUP_CONFIG[group], _option_overrides(group, option), conf)
    assert f"In '{group}/{option}'" in str(e.value) and "Key 'max_new_tokenz' not in '" in str(e.value), e.value


# (entry point's config, the misspelt option, one option that exists)
OPTION_TYPOS = [("build", "wordings=v99", "v9"), ("sft", "subset=safety_cod", "safety_code"),
                ("sft", "trainer=pefft", "peft"), ("holdout", "model=gpt5", "qwen3_8b"),
                ("holdout", "backend=nope", "vllm"), ("holdout", "prompt=direct_v9", "direct_v1"),
                ("pipeline", "experiment=smok", "smoke")]


@pytest.mark.parametrize("config_name, override, valid", OPTION_TYPOS, ids=[o for _, o, _ in OPTION_TYPOS])
def test_a_misspelt_option_fails_at_compose_time_listing_the_options(config_name, override, valid):
    group, _, option = override.partition("=")
    with pytest.raises(MissingConfigException, match=f"Could not find '{group}/{option}'") as e:
        _compose(config_name, [override])
    assert re.search(rf"Available options in '{group}':.*\b{valid}\b", str(e.value), re.S), e.value
