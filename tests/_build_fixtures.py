"""Helpers for data-build tests: compose the real build config and build into tmp dirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from automon.subsets import names as subset_names

REPO = Path(__file__).resolve().parents[1]
RAW = REPO.parent / "shared" / "data" / "raw"
CONF = REPO / "conf"

needs_raw = pytest.mark.skipif(not RAW.is_dir(), reason=f"real source data not found at {RAW}")


def build_cfg(overrides: list[str]):
    """The build config exactly as data_build/build.py composes it (Hydra compose API)."""
    from hydra import compose, initialize_config_dir

    from automon.config.build import register

    register()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(config_name="build", overrides=overrides)


# Every registered subset: the synthetic sources cannot fill the paper's test sizes.
SMALL_TEST = [f"test.{s}=6" for s in subset_names()]
