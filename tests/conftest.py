"""Fixtures shared by every test folder (helpers they build on: tests/support.py).

The test tree mirrors the package: tests/<package>/ tests src/automon/<package>/, and
tests/test_<module>.py tests src/automon/<module>.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/support.py is importable from every subfolder (the folders have no __init__.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))

import support  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    return Path(support.tiny_path())


@pytest.fixture(scope="session")
def tiny_tok(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def small_build(tmp_path_factory) -> Path:
    """8 training samples per subset (every 5th long enough to be shortened), 1 test pair per subset."""
    return support.make_build(tmp_path_factory.mktemp("build") / "b", pairs_per_subset=1, train_per_subset=8,
                              train_long_every=5)


@pytest.fixture
def scripted_backend():
    """backend `scripted` in the judge registry for one test (support.scripted_backend); yields
    support.SCRIPTS, where the test puts its answer functions."""
    from automon.backends import BACKENDS

    BACKENDS["scripted"] = support.scripted_backend()
    support.SCRIPTS.clear()
    try:
        yield support.SCRIPTS
    finally:
        BACKENDS.pop("scripted", None)
        support.SCRIPTS.clear()


@pytest.fixture
def fake_openai():
    """A fake OpenAI-compatible server on 127.0.0.1 for one test (tests/fake_openai.py); `.url` is
    its base_url."""
    from fake_openai import FakeOpenAI

    server = FakeOpenAI()
    try:
        yield server
    finally:
        server.close()
