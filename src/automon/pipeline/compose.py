"""Each stage's config, composed in this process with Hydra's compose API from the same primary
config (conf/build.yaml, sft.yaml, holdout.yaml) and the same overrides its command line gets.

pipeline.py runs inside its own @hydra.main, and Hydra keeps one global state: `hydra_for(conf)`
sets that state aside, initialises Hydra on conf/ for the stages, and puts it back afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from automon.config import build, eval, probe, train
from automon.errors import HYDRA_USAGE, hydra_line, one_line


class CompositionError(ValueError):
    """A stage rejects the overrides the pipeline derived for it; the message is Hydra's or the stage's."""


def register_stage_schemas() -> None:
    """The stages' structured configs, as their entry points register them at import."""
    build.register()
    train.register()
    eval.register()
    probe.register()


@contextmanager
def hydra_for(conf_dir: Path) -> Iterator[None]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    register_stage_schemas()
    saved = get_gh_backup()  # pipeline.py's own Hydra state (None outside @hydra.main, e.g. in tests)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base=None):
            yield
    finally:
        restore_gh_from_backup(saved)


def compose(config_name: str, overrides: Sequence[str]) -> DictConfig:
    """The stage's job config for `overrides` (inside `hydra_for`); CompositionError with Hydra's
    message when the stage would reject them."""
    from hydra import compose as hydra_compose
    from hydra.errors import HydraException

    try:
        return hydra_compose(config_name=config_name, overrides=list(overrides))
    except HydraException as e:  # one line, without Hydra's advice to append a typo with '+'
        raise CompositionError(hydra_line(e).removesuffix(HYDRA_USAGE)) from None
    except OmegaConfBaseException as e:
        raise CompositionError(_message(e)) from None


def _message(e: BaseException) -> str:
    """Hydra wraps OmegaConf's error (which names the key and the schema) in its own: keep both."""
    parts = [str(e).strip()]
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause).strip() and str(cause).strip() not in parts[0]:
        parts.append(str(cause).strip())
    return "; ".join(one_line(p.split("full_key:")[0]) for p in parts)
