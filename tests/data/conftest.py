"""Fixtures for tests/data: the default build of the real sources, made once per session and read by
every real-data test (test_build_real.py, test_near_duplicates.py)."""

from __future__ import annotations

import pytest

from support import RAW, build_cfg, requires_realdata


@pytest.fixture(scope="session")
def real_build(tmp_path_factory):
    requires_realdata()
    from automon.data.io import load_build
    from automon.data.build import run_build

    out = tmp_path_factory.mktemp("real") / "default"
    run_build(build_cfg([f"sources.root={RAW}", f"out={out}"]))
    return load_build(out)
