"""automon.errors: the one-line convention of every entry script, on a small Hydra script of its own."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from automon.errors import UserError, at_least, one_of

SCRIPT = '''
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from automon.errors import UserError, entry


@dataclass
class C:
    what: str = "ok"
    n: int = 1


ConfigStore.instance().store(name="c", node=C)


class Registered(RuntimeError):
    pass


@entry(config_path=None, config_name="c", also=(Registered,))
def main(cfg):
    if cfg.what == "user":
        raise UserError("the thing is broken", "f.txt:3", "fix line 3")
    if cfg.what == "registered":
        raise Registered("a registered\\n  user error")
    if cfg.what == "bug":
        raise KeyError("a bug")
    if cfg.what == "status":
        return 3
    if cfg.what == "ctrlc":
        raise KeyboardInterrupt
    print("ran", cfg.n)


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    p = tmp_path_factory.mktemp("entry") / "script.py"
    p.write_text(SCRIPT)
    return p


def run(script, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args, "hydra.run.dir=.", "hydra.output_subdir=null"],
                          capture_output=True, text=True, timeout=120, cwd=script.parent,
                          env={k: v for k, v in dict(os.environ, **env).items() if k != "AUTOMON_DEBUG" or k in env})


def only_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_user_errors_and_registered_types_are_one_line_exit_2(script):
    assert only_line(run(script, "what=user")) == "error: the thing is broken (f.txt:3); fix line 3"
    assert only_line(run(script, "what=registered")) == "error: a registered user error"


def test_config_hydra_cannot_compose_is_one_line_exit_2(script):
    assert "could not be converted to Integer" in only_line(run(script, "n=abc"))
    assert "valid keys here: what, n" in only_line(run(script, "m=1"))


def test_bugs_keep_their_traceback_and_the_debug_env_shows_one_for_user_errors(script):
    r = run(script, "what=bug")
    assert r.returncode == 1 and "Traceback" in r.stderr and "KeyError: 'a bug'" in r.stderr
    r = run(script, "what=user", AUTOMON_DEBUG="1")
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == "error: the thing is broken (f.txt:3); fix line 3"


def test_status_is_the_exit_status_and_a_sweep_runs_every_job(script):
    assert run(script, "what=status").returncode == 3
    r = run(script, "-m", "n=1,2", "hydra.sweep.dir=sweep")
    assert r.returncode == 0 and "ran 1" in r.stdout and "ran 2" in r.stdout, r.stderr


def test_config_checks_name_the_key_and_the_valid_values():
    with pytest.raises(UserError) as e:
        one_of("x.mode", "bogus", ("a", "b"))
    assert str(e.value) == "x.mode='bogus' is not a valid value (x.mode); use one of: a, b"
    with pytest.raises(UserError, match=r"x.n=-1 is out of range \(x.n\); use a value >= 0"):
        at_least("x.n", -1, 0)
    one_of("x.mode", "a", ("a", "b"))
    at_least("x.n", 0, 0)


def test_ctrl_c_is_one_line_and_exit_130(script):
    """A KeyboardInterrupt traceback once ended every entry point on Ctrl-C."""
    r = run(script, "what=ctrlc")
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: interrupted (Ctrl-C)") and "rerun the same command" in line
    r = run(script, "what=ctrlc", AUTOMON_DEBUG="1")
    assert r.returncode == 130 and "KeyboardInterrupt" in r.stderr


def test_an_unknown_flag_is_one_line_not_argparse_usage(script):
    assert "unknown option(s) --bogus; settings are key=value" in only_line(run(script, "--bogus"))
    assert "invalid choice: 'bogus'" in only_line(run(script, "--cfg", "bogus"))
    r = run(script, "--cfg", "job")
    assert r.returncode == 0 and "what: ok" in r.stdout, r.stderr


# Python runs sitecustomize (first on PYTHONPATH) before the script: this one sends the process SIGINT
# when the module named by $SIGINT_AT is first imported, i.e. Ctrl-C at that moment of the script's
# start-up, every time (a SIGINT sent from outside 0.4-0.7 s after start lands somewhere by chance).
SIGINT_AT = '''
import os, signal, sys


class SigintAt:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["SIGINT_AT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, SigintAt())
'''

REPO = Path(__file__).resolve().parents[1]
ENTRY_SCRIPTS = ("eval/holdout.py", "data_build/build.py", "data_build/audit.py", "data_build/annotate.py",
                 "train/sft.py", "train/probe.py", "pipeline.py")


def test_every_entry_script_imports_the_start_up_guard_first():
    scripts = {str(p.relative_to(REPO)) for d in ("eval", "data_build", "train") for p in (REPO / d).glob("*.py")}
    # the inspect_ai task file is read by `inspect eval`, whose CLI reports its own errors: no Hydra entry
    assert scripts - {"eval/inspect_task.py"} | {"pipeline.py"} == set(ENTRY_SCRIPTS)
    for s in ENTRY_SCRIPTS:
        code = [ln for ln in ast.parse((REPO / s).read_text()).body if not isinstance(ln, ast.Expr)]  # docstring
        assert isinstance(code[0], ast.Import) and code[0].names[0].name == "automon.startup", s


@pytest.mark.parametrize("at", ["automon.config", "omegaconf", "hydra"])  # three points of the imports
@pytest.mark.parametrize("script", ENTRY_SCRIPTS)
def test_ctrl_c_while_an_entry_script_still_imports_is_one_line_and_exit_130(tmp_path, script, at):
    """Ctrl-C in the first second, before entry() runs, was a KeyboardInterrupt traceback."""
    (tmp_path / "sitecustomize.py").write_text(SIGINT_AT)
    env = {k: v for k, v in os.environ.items() if k != "AUTOMON_DEBUG"}
    env.update(SIGINT_AT=at, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, str(REPO / script), f"output_dir={tmp_path / 'o'}"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path, env=env)
    assert r.returncode == 130 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: interrupted (Ctrl-C)") and "rerun the same command" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sitecustomize.py"]  # nothing written


# A signal whose handler runs inside a finalizer: Python prints 'Exception ignored' and drops what the
# handler raised, so without automon.errors.resend_dropped_signals the process would sleep on.
DROPPED_SIGNAL = """
import os, signal, sys, time
from automon.errors import end_start, guard_start

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))  # the handler runs in here
        for _ in range(1000):
            pass

guard_start()
end_start()
if sys.argv[1] == "SIGTERM":
    from automon.data.cli import stop_cleanly_on_sigterm  # the build's handler
    stop_cleanly_on_sigterm()
try:
    Finalized()
    time.sleep(30)
    print("ran on")
except KeyboardInterrupt:
    print("interrupted")
finally:
    print("cleaned up")
"""


@pytest.mark.parametrize("sig, status, out", [("SIGTERM", 128 + signal.SIGTERM, "cleaned up\n"),
                                              ("SIGINT", 0, "interrupted\ncleaned up\n")])
def test_a_signal_python_drops_in_a_finalizer_is_sent_again(sig, status, out):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", DROPPED_SIGNAL, sig], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (status, out), r.stderr
    assert "Exception ignored" not in r.stderr, r.stderr
    assert time.monotonic() - t0 < 20  # not after the 30 s sleep
