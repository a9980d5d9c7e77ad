"""The warm interpreter (tests/warm_python.py) runs a script as a fresh `python script.py` would: the
same exit status, stdout and stderr, for each way a script can end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from warm_python import WarmPython

SCRIPT = """
import atexit, os, sys, threading, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "path", sys.path, "name", __name__, "torch" in sys.modules)
print("env", os.environ.get("WARM_PROBE"), "stdin", sys.stdin.read() == "")
atexit.register(lambda: print("atexit ran", flush=True))
how = sys.argv[1]
if how == "thread":
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread done"))).start()
elif how == "exit3":
    sys.exit(3)
elif how == "exit-message":
    sys.exit("a message")
elif how == "raise":
    def f():
        raise ValueError("boom")
    f()
elif how == "killed":
    sys.stdout.flush()
    os.kill(os.getpid(), 9)
elif how == "sleep":
    time.sleep(30)
print("end")
"""


@pytest.fixture(scope="module")
def warm():
    w = WarmPython(honour_cold=False)  # what is under test, whatever AUTOMON_TEST_COLD says
    yield w
    w.close()


@pytest.mark.parametrize("how", ["normal", "thread", "exit3", "exit-message", "raise", "killed"])
def test_a_run_ends_as_in_a_fresh_interpreter(warm, tmp_path, how):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    argv = [sys.executable, str(script), how]
    fresh = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    got = warm.run(argv, cwd=tmp_path, env=env, timeout=60)
    assert warm._proc is not None, "the run should have gone to the warm interpreter"
    # the one difference by design: torch is already imported there
    assert got.stdout.replace("True\n", "False\n", 1) == fresh.stdout
    assert (got.returncode, got.stderr) == (fresh.returncode, fresh.stderr)


def test_another_environment_gets_a_fresh_interpreter_and_a_hung_run_times_out(warm, tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    r = warm.run([sys.executable, str(script), "normal"], cwd=tmp_path, env={**os.environ, "WARM_PROBE": "x"},
                 timeout=60)
    assert "env x" in r.stdout and "False\n" in r.stdout  # torch not imported: a fresh interpreter
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run([sys.executable, str(script), "sleep"], cwd=tmp_path, env=dict(os.environ), timeout=2)
    assert warm.run([sys.executable, str(script), "normal"], cwd=tmp_path, env=dict(os.environ),
                    timeout=60).returncode == 0  # the server carries on
