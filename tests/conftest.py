"""Fixtures shared by every test folder (helpers they build on: tests/support.py).

The test tree mirrors the package: tests/<package>/ tests src/automon/<package>/, and
tests/test_<module>.py tests src/automon/<module>.py.
"""

from __future__ import annotations

import os
import signal
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


@pytest.fixture(scope="session")
def real_build(tmp_path_factory):
    """The default build of the real sources, made once per test run (under pytest-xdist by the first
    worker that asks; the others wait for it and read the same files); read-only for the tests."""
    support.requires_realdata()
    from filelock import FileLock

    from automon.data.build import run_build
    from automon.data.io import load_build

    shared = support.shared_by_workers(tmp_path_factory)
    out = shared / "real-build" / "default"
    with FileLock(str(shared / "real-build.lock")):
        if not (out / "manifest.json").is_file():  # run_build writes atomically: a manifest is a whole build
            run_build(support.build_cfg([f"sources.root={support.RAW}", f"out={out}"]))
    return load_build(out)


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


# A shell starts a background job (`pytest ... &` in a script) with SIGINT ignored, and an ignored signal
# stays ignored across exec: every run a test starts would then shrug off the Ctrl-C the tests send it.
# Python leaves SIGINT ignored where it found it so; the suite restores what a terminal gives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Every script imports automon.startup first, whose Ctrl-C handler stays until the script's main runs.
# Tests that load a script's functions (runpy.run_path, importlib) never run its main: whichever ran first
# in a worker left that handler to the worker's later tests (test_train_run's Ctrl-C test failed or
# passed by the order xdist handed files out). Imported here once and handed back, later imports are no-ops.
import automon.startup  # noqa: E402,F401
from automon.errors import end_start  # noqa: E402

end_start()

# Under pytest-xdist (`make test` runs `pytest -n auto --dist loadfile`): one OpenMP / BLAS thread per
# worker and per process it starts (a training run, a stage), so that two workers on two cores do
# not oversubscribe them (torch's spinning threads made a contended run slower than a serial one).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

# The longest files of a measured run (`pytest --durations=0`, 2 cores), handed out first so that the
# workers finish together rather than one starting the longest file last. Ordering only: a stale
# entry costs time, never coverage.
LONGEST_FIRST = ("tests/pipeline/test_pipeline.py", "tests/data/test_build_real.py", "tests/training/test_train_run.py",
                 "tests/policy/test_policy_build.py", "tests/training/test_train_faults.py",
                 "tests/data/test_build.py", "tests/evaluation/test_eval_faults.py",
                 "tests/training/test_packing_bench.py", "tests/training/test_packing_model.py",
                 "tests/config/test_schema_walk.py", "tests/evaluation/test_eval_run.py",
                 "tests/data/test_build_machine.py", "tests/data/test_near_duplicates.py")


def pytest_collection_modifyitems(config, items):
    """The LONGEST_FIRST files first, each file's tests together and in their order."""
    root = Path(__file__).resolve().parent.parent
    rank = {f: i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(Path(it.path).resolve().relative_to(root).as_posix(), len(rank)))

