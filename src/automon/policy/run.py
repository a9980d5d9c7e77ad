"""The policy of one build: its model and backend (from the build's `policy` node), built lazily
once, and its cached answers."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Sequence

from automon.backends import BACKENDS
from automon.backends.base import JudgeError, JudgeResult
from automon.config import CONF_DIR
from automon.config.common import ConfigError, ModelConfig
from automon.errors import UserError
from automon.models.loading import load_tokenizer
from automon.outdir import OutDirError, ensure_writable_dir
from automon.policy.generate import Ask, PolicyAnswers

log = logging.getLogger("automon.policy")


class PolicyError(UserError, RuntimeError):
    """A policy that cannot run as configured; the message says what to change."""


def model_config(name: str, conf_dir: Path = CONF_DIR, key: str = "policy") -> Any:
    """conf/model/<name>.yaml as a typed ModelConfig (an unknown key or option stops here); `key` is
    the config node that names it (policy: the build's; paraphrase: the evaluation's paraphrase stress)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = conf_dir / "model" / f"{name}.yaml"
    if not path.is_file():
        options = sorted(p.stem for p in (conf_dir / "model").glob("*.yaml"))
        raise PolicyError(f"{key}.model={name!r} is not a model option", f"{key}.model",
                          f"use one of: {', '.join(options)}")
    raw = OmegaConf.load(path)
    raw.pop("defaults", None)
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), raw))
    except OmegaConfBaseException as e:
        raise PolicyError(f"{path} does not fit the model schema: {e}", str(path)) from e


def backend_config(name: str, args: dict, key: str = "policy") -> Any:
    """The backend's own typed config with `<key>.backend_args` over its defaults."""
    if name not in BACKENDS:
        raise PolicyError(f"{key}.backend={name!r} is not a backend", f"{key}.backend",
                          f"use one of: {', '.join(BACKENDS)}")
    cls = BACKENDS[name]
    known = {f.name for f in dataclasses.fields(cls)} - {"name"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise PolicyError(f"{key}.backend_args has key(s) {unknown} that backend={name} does not have",
                          f"{key}.backend_args", f"use keys of conf/backend/{name}.yaml: {', '.join(sorted(known))}")
    try:
        return cls(**dict(args))
    except ConfigError as e:
        raise PolicyError(args_named(str(e), key)) from e


def args_named(message: str, key: str) -> str:
    """A backend's own message names its keys backend.<k>; a policy sets them as <key>.backend_args.<k>."""
    return message.replace("backend.", f"{key}.backend_args.")


class Policy:
    """One build's policy: answers (cached) and what every policy sample records about it. `pcfg` has
    the keys of the build's `policy` node that name and run the model (model, backend, backend_args,
    max_new_tokens, seed, cache); `key` names that node in errors (the evaluation's paraphrase stress
    uses its own node, `paraphrase`)."""

    def __init__(self, pcfg: Any, key: str = "policy"):
        self.cfg = pcfg
        self.model = model_config(pcfg.model, key=key)
        args = dict(pcfg.backend_args or {})
        self.backend = backend_config(pcfg.backend, args, key=key)
        if not self.backend.generates:  # a NotImplementedError once the policy opened, past the start-up check
            raise PolicyError(f"{key}.backend={pcfg.backend} cannot write answers (it only scores)", f"{key}.backend",
                              f"use {key}.backend=" + " or ".join(n for n, b in BACKENDS.items() if b.generates))
        if "seed" in {f.name for f in dataclasses.fields(self.backend)} and "seed" not in args:
            self.backend.seed = pcfg.seed  # an API's sampling seed follows policy.seed
        try:
            self.backend.check_model(self.model)
        except ValueError as e:  # the model (model=api), or a backend_args setting this machine cannot run
            raise PolicyError(args_named(str(e), key), None if "backend." in str(e) else f"{key}.model") from e
        if not Path(pcfg.cache).is_dir():  # a file (or no way to make it) failed once the model had loaded,
            try:                           # naming cache_dir=; an existing dir is read first
                ensure_writable_dir(pcfg.cache, f"{key}.cache")
            except OutDirError as e:
                raise PolicyError(str(e)) from None
        self.key = key
        self._answers: PolicyAnswers | None = None
        self._judge = None

    def identity(self) -> dict:
        return {"backend": self.backend.name, **self.backend.cache_identity(self.model, "generate", None),
                "seed": self.cfg.seed}

    def describe(self) -> dict:
        """What every policy sample's meta records as its generator's model."""
        return {"model": self.backend.model_label(self.model), "backend": self.backend.name,
                "identity": self.identity(), "max_new_tokens": self.cfg.max_new_tokens, "seed": self.cfg.seed}

    def _open(self) -> PolicyAnswers:
        if self._answers is None:
            tokenizer = None
            if self.backend.local_model:
                tokenizer = load_tokenizer(self.model)
                import torch

                torch.manual_seed(self.cfg.seed)
            log.info("policy: %s on backend=%s", self.model.name, self.backend.name)
            try:
                self._judge = self.backend.make_judge(self.model, "generate", [], tokenizer)
            except JudgeError as e:  # a setting this machine cannot run (device=cuda without a GPU)
                raise PolicyError(args_named(e.line(), self.key)) from None
            if not hasattr(self._judge, "generate"):
                raise PolicyError(f"backend={self.backend.name} cannot generate answers", f"{self.key}.backend",
                                  f"use {self.key}.backend=hf, vllm or openai")
            self._answers = PolicyAnswers(self._judge, self.identity(), self.cfg.cache,
                                          max_new_tokens=self.cfg.max_new_tokens,
                                          chunk_size=self.backend.chunk_size, tokenizer=tokenizer,
                                          enable_thinking=self.model.enable_thinking)
        return self._answers

    def answer(self, asks: Sequence[Ask]) -> dict[str, JudgeResult]:
        return self._open().answer(asks) if asks else {}

    @property
    def stats(self) -> dict:
        return dict(self._answers.stats) if self._answers else {}

    def close(self) -> None:
        if self._judge is not None:
            self._judge.close()
