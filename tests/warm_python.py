"""A warm interpreter for the tests' runs of train/sft.py (support.run_sft).

A run of train/sft.py in a fresh interpreter spends about 7 of its 10 s on a CPU importing torch,
transformers, PEFT and TRL, and the suite runs it some 45 times. Here one server process per test
worker imports those libraries once, and nothing of automon; each run is a child forked from it, which
runs the script the way `python train/sft.py ...` does:

- the script runs as `__main__` (runpy) with its own argv, cwd and sys.path[0] (the script's directory),
  stdin /dev/null, stdout and stderr to files the caller reads; every automon module is imported fresh;
- the random generators are seeded afresh (a fresh interpreter seeds random, numpy and torch from the OS);
- it exits as the interpreter would: SystemExit's status (None 0, an int that int, else printed and 1),
  an uncaught exception's traceback and status 1, a signal's death as such (returncode -N); then
  non-daemon threads are joined, atexit handlers run and the streams flushed (multiprocessing's
  forked children exit the same way).

The libraries read some variables when imported (HF_HUB_OFFLINE, ...), so only a run whose environment
is the server's (PYTEST_CURRENT_TEST apart) goes there; any other, and every run under AUTOMON_TEST_COLD=1, gets a fresh
interpreter. Linux (fork) only, like the sandbox; elsewhere every run is a fresh interpreter.

Run as a script, this file is the server (stdlib imports only, then PRELOAD).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

PRELOAD = ("torch", "numpy", "transformers", "datasets", "accelerate", "peft", "trl.trainer.sft_trainer")
COLD_ENV = "AUTOMON_TEST_COLD"


class WarmPython:
    """One server for this process (each xdist worker has its own), started on first use in this
    process's environment; the runs in that environment go to it."""

    def __init__(self, honour_cold: bool = True) -> None:
        self._honour_cold = honour_cold  # False: AUTOMON_TEST_COLD=1 is ignored (tests of this module)
        self._proc: subprocess.Popen | None = None
        self._env: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._pending = b""  # reply bytes read but not yet taken

    def _warm_for(self, env: dict[str, str]) -> bool:
        """Whether a run in `env` goes to the server (a dead one, or one of an older environment of
        this process, is let go first)."""
        if (self._honour_cold and os.environ.get(COLD_ENV) == "1") or not hasattr(os, "fork"):
            return False
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None  # it died: start another
        if self._proc is not None and _imports_see(dict(os.environ)) != _imports_see(self._env):
            self.close()  # this process's environment changed since (a test's monkeypatch): start another
        return _imports_see(env) == _imports_see(dict(os.environ))

    def run(self, argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """Like subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout),
        argv[0] being sys.executable and argv[1] the script; a fresh interpreter where not _warm_for(env)."""
        with self._lock:
            if not self._warm_for(env):
                return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            return self._run_warm(argv, cwd, env, timeout)

    def _run_warm(self, argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float
                  ) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="warm-run-") as tmp:
            proc = self._server()
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            req = {"argv": list(argv[1:]), "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            pid = self._reply(proc, 60)["pid"]
            try:
                status = self._reply(proc, timeout)["status"]
            except subprocess.TimeoutExpired:
                os.kill(pid, 9)
                self._reply(proc, 60)  # the server reaps it
                raise subprocess.TimeoutExpired(list(argv), timeout, out.read_text(errors="replace"),
                                                err.read_text(errors="replace")) from None
            return subprocess.CompletedProcess(list(argv), status, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def close(self) -> None:
        """End the server (it ends at EOF); the next warm run starts another."""
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait(60)
            self._proc = None

    def _server(self) -> subprocess.Popen:
        """The server, in this process's environment (a run is sent here only if it has the same)."""
        if self._proc is None:
            self._env = dict(os.environ)
            self._proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          env=self._env, text=True)
            self._pending = b""
            assert self._reply(self._proc, 300) == {"ready": True}
        return self._proc

    def _reply(self, proc: subprocess.Popen, timeout: float) -> dict:
        """The server's next reply line (read from the pipe unbuffered: select must see what is left)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"the warm interpreter ({proc.args}) died: exit {proc.wait()}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)


def _imports_see(env: dict[str, str]) -> dict[str, str]:
    """The environment as the preloaded imports would see it: all of it but pytest's own per-test
    bookkeeping (the child gets the run's whole environment all the same)."""
    return {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(req: dict) -> None:
    """The forked run; never returns."""
    status = 1
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        import random

        random.seed()
        if "numpy" in sys.modules:  # preloaded: seeded afresh; otherwise the script imports it fresh
            sys.modules["numpy"].random.seed()
        if "torch" in sys.modules:
            sys.modules["torch"].seed()
        import runpy

        script = os.path.abspath(req["argv"][0])
        sys.argv = list(req["argv"])
        # Prepended, as `python script.py` does: the server popped its own directory, so sys.path[0] is
        # now the first PYTHONPATH entry (overwriting it lost automon where PYTHONPATH held the src/
        # that site's .pth then skips as a duplicate).
        sys.path.insert(0, os.path.dirname(script))
        try:
            runpy.run_path(script, run_name="__main__")
            status = 0
        except SystemExit as e:
            status = _exit_status(e.code)
        except BaseException as e:
            tb = e.__traceback__  # from the script's own frames on, as a fresh interpreter prints it
            while tb is not None and tb.tb_frame.f_code.co_filename != script:
                tb = tb.tb_next
            e = e.with_traceback(tb or e.__traceback__)  # the hook prints the exception's own
            sys.excepthook(type(e), e, e.__traceback__)
            status = 1
        import atexit

        threading._shutdown()  # what the interpreter does at exit, in its order
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing left to flush
                pass
        os._exit(status)


def _serve() -> None:
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)  # a library's stray print must not land in the replies
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed here: the runs import what they need themselves
            pass
    replies.write(json.dumps({"ready": True}) + "\n")
    for line in requests:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            _child(req)
        replies.write(json.dumps({"pid": pid}) + "\n")
        _, wait_status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": os.waitstatus_to_exitcode(wait_status)}) + "\n")


if __name__ == "__main__":
    sys.path.pop(0)  # tests/ is no package of the runs'
    _serve()
