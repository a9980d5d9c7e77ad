"""The warm interpreter (tests/warm_python.py) runs a script as a fresh `python script.py` would: the
same exit status, stdout and stderr, for each way a script can end; its launcher stands where `python`
would, passing signals on to the run and taking it down with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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
elif how == "interrupted":
    os.kill(os.getpid(), 2)
    time.sleep(5)
elif how == "sleep":
    import signal
    signal.signal(signal.SIGUSR1, lambda *a: print("got SIGUSR1", flush=True))
    print("pid", os.getpid(), flush=True)
    time.sleep(30)
print("end")
"""


@pytest.fixture(scope="module")
def warm():
    w = WarmPython(honour_cold=False)  # what is under test, whatever AUTOMON_TEST_COLD says
    yield w
    w.close()


@pytest.mark.parametrize("how", ["normal", "thread", "exit3", "exit-message", "raise", "killed", "interrupted"])
@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_run_ends_as_in_a_fresh_interpreter(warm, tmp_path, how, unbuffered):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    argv = [sys.executable, str(script), how]
    fresh = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    served = warm.served()
    got = warm.run(argv, cwd=tmp_path, env=env, timeout=60) if unbuffered else \
        subprocess.run([warm.launcher(env), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert warm.served() == served + 1, "the run should have gone to the warm interpreter"
    # the one difference by design: torch is already imported there
    assert got.stdout.replace("True\n", "False\n", 1) == fresh.stdout
    assert (got.returncode, got.stderr) == (fresh.returncode, fresh.stderr)


def test_what_the_server_made_outlives_each_run_and_what_a_run_made_goes_with_it(warm, tmp_path):
    """The preloaded imports make a temporary directory (wandb's media directory) that every run shares:
    a run's exit once removed it, and the next run that logged a wandb table failed. A temporary
    directory the run makes itself is still removed at its exit, as in a fresh interpreter."""
    script = tmp_path / "tmp.py"
    script.write_text("import os, tempfile\n"
                      "from wandb.sdk.data_types._private import MEDIA_TMP\n"
                      "own = tempfile.TemporaryDirectory()\n"
                      "print(MEDIA_TMP.name, os.path.isdir(MEDIA_TMP.name), own.name)\n")
    env = dict(os.environ)
    runs = [warm.run([sys.executable, str(script)], cwd=tmp_path, env=env, timeout=60) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    (shared, exists, own), (shared2, exists2, _) = (r.stdout.split() for r in runs)
    assert shared == shared2 and exists == exists2 == "True" and os.path.isdir(shared)
    assert not os.path.exists(own)  # the run's own directory went with it


def test_the_launcher_passes_signals_on_and_takes_its_run_down_when_killed(warm, tmp_path):
    """As the pipeline uses it (`python=<launcher>`): a signal sent to the launcher reaches the run; the
    run's death by a signal is the launcher's; a launcher killed outright leaves no run behind."""
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    launcher = warm.launcher(env)

    def start():
        p = subprocess.Popen([launcher, str(script), "sleep"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        lines = [p.stdout.readline() for _ in range(3)]  # argv..., env..., pid N
        line = lines[-1]
        assert line.startswith("pid "), lines
        return p, int(line.split()[1])

    p, pid = start()
    assert pid != p.pid
    p.send_signal(signal.SIGUSR1)
    assert p.stdout.readline() == "got SIGUSR1\n"
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == -signal.SIGTERM

    p, pid = start()
    p.kill()
    p.wait(30)
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), "the run outlived its launcher"


def test_a_command_the_server_does_not_take_runs_fresh_through_the_launcher(warm, tmp_path):
    env = dict(os.environ)
    served = warm.served()
    r = subprocess.run([warm.launcher(env), "-c", "import sys; print('torch' in sys.modules); sys.exit(4)"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (4, "False\n") and warm.served() == served
    r = subprocess.run([warm.launcher(env), "s.py"], cwd=tmp_path, env={**env, "WARM_PROBE": "y"},
                       capture_output=True, text=True, timeout=60)  # another environment; no such script
    assert r.returncode == 2 and "can't open file" in r.stderr and warm.served() == served


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


@pytest.mark.gpu
def test_a_run_through_the_launcher_can_use_the_gpu(warm, tmp_path):
    """On a CUDA machine a run gets the GPU: forked warm if the preloaded imports left CUDA untouched,
    else run fresh with the reason noted (a fork after the driver was asked cannot initialise CUDA)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    script = tmp_path / "gpu.py"
    script.write_text("import torch\nprint('sum', int(torch.ones(3, device='cuda').sum()))\n")
    served = warm.served()
    r = warm.run([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert (r.returncode, r.stdout) == (0, "sum 3\n"), r.stderr[-3000:]
    refused = [line for line in warm.refused() if "gpu.py" in line]
    assert warm.served() == served + 1 or any("CUDA was touched" in line for line in refused), refused
