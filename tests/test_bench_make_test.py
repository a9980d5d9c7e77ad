"""bench/bench_make_test.py: what it reads from a real pytest run, and the CPU it counts."""

from __future__ import annotations

import subprocess
import sys
import time

from support import REPO

sys.path.insert(0, str(REPO / "bench"))
from bench_make_test import CpuSampler, parse_pytest_output  # noqa: E402


def test_a_real_pytest_log_gives_its_counts_durations_and_files(tmp_path):
    for name, body in (("test_a.py", "import time\ndef test_slow():\n    time.sleep(0.3)\ndef test_no():\n    assert 0\n"),
                       ("test_b.py", "import pytest\n@pytest.mark.skip\ndef test_s():\n    pass\ndef test_ok():\n    pass\n")):
        (tmp_path / name).write_text(body)
    r = subprocess.run([sys.executable, "-m", "pytest", "--durations=0", "-p", "no:cacheprovider", "-o", "addopts=",
                        str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    got = parse_pytest_output(r.stdout)
    assert (got["passed"], got["failed"], got["skipped"], got["errors"]) == (2, 1, 1, 0), r.stdout[-2000:]
    assert list(got["largest_files_s"])[0].endswith("test_a.py") and got["largest_files_s"][list(got["largest_files_s"])[0]] >= 0.3
    assert got["summed_test_durations_s"] == round(sum(got["largest_files_s"].values()))


def test_the_sampler_counts_a_spinning_core_as_busy():
    """One core spinning on a 2-core (or larger, busier) machine: at least a share of the cores is busy."""
    import os

    with CpuSampler(every_s=0.1) as cpu:
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:
            pass
    busy, idle = cpu.totals()
    shares = cpu.busy_percent()
    assert len(shares) >= 4 and busy >= 0 and idle >= 0
    assert sum(shares) / len(shares) >= 100 / (os.cpu_count() or 1) - 15, shares


def test_a_commit_it_cannot_check_out_is_one_error_line(tmp_path):
    for args in (["--commit", "no-such-commit", "--dir", str(tmp_path)], ["--commit", "HEAD~1", "--in-place"]):
        r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_make_test.py"), *args, "--out",
                            str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("error: --commit") and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "r.json").exists() and list(tmp_path.iterdir()) == []  # the clone is gone too
