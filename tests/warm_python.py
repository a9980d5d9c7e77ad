"""Warm interpreters for the tests' runs of the stage scripts (train/sft.py, eval/holdout.py,
data_build/build.py, train/probe.py), directly (support.run_sft) or as the pipeline's stages.

A run of train/sft.py in a fresh interpreter spends about 7 of its 10 s on a CPU importing torch,
transformers, PEFT and TRL, and the suite runs the stage scripts some 130 times. Here a server process
imports those libraries once (PRELOAD, with automon's config, evaluation and training packages, none of
which reads the environment or the working directory when imported); each run is a child forked from
it, which runs the script the way `python script.py ...` does:

- the script runs as `__main__` (runpy) with its own argv, cwd, environment and sys.path[0] (the
  script's directory), on the caller's stdin, stdout and stderr (the descriptors themselves, passed
  over the server's socket), in a session of its own; the script itself and the automon modules
  PRELOAD does not reach are imported fresh;
- the standard streams are made as a fresh interpreter makes them (PYTHONUNBUFFERED honoured);
- the random generators are seeded afresh (a fresh interpreter seeds random, numpy and torch from the OS);
- the objects the server's imports made are frozen (gc.freeze): a run's garbage collections skip them;
- it exits as the interpreter would: SystemExit's status (None 0, an int that int, else printed and 1),
  an uncaught exception's traceback and status 1, a signal's death as such (returncode -N); then
  non-daemon threads are joined, atexit handlers run and the streams flushed.

The caller's side is a LAUNCHER, an executable that stands where `python` would (the pipeline's
`python=` setting, or WarmPython.run's command): `launcher script.py args...`. It is a small
standard-library client (`python -SE`, running this file as `--client DIRECTORY PYTHON script.py ...`)
that hands the run to the server of its environment, passes on the signals it gets (SIGINT, SIGTERM,
SIGUSR1, ...) to the run, and exits with the run's status (or dies of the run's signal). A run no
server takes (no server for its environment, a `-c`/`-m` command) is exec'd in a fresh interpreter by
the launcher itself, and noted with why (WarmPython.refused): a launcher is always a correct `python`,
only sometimes a faster one.

The libraries read some variables when imported (HF_HUB_OFFLINE, ...), so a server takes only runs
whose environment is its own (but for what _NOT_KEYED lists). AUTOMON_TEST_COLD=1 runs every one fresh.
Linux (fork, SCM_RIGHTS) only, like the sandbox; elsewhere every run is a fresh interpreter.

Run as `python warm_python.py DIRECTORY`, this file is a server (stdlib imports only, then PRELOAD); it
ends when its standard input closes (its WarmPython closed, or the test process ended), killing the
runs still going.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

# matplotlib's figure and Agg modules (no backend chosen: the runs choose theirs) for evaluations' plots;
# scikit-learn's linear models for the builds' audits and the probes; Hydra and automon's stage packages,
# which every run imports.
PRELOAD = ("torch", "numpy", "transformers", "datasets", "accelerate", "peft", "trl.trainer.sft_trainer",
           "matplotlib.figure", "matplotlib.backends.backend_agg", "sklearn.linear_model", "hydra",
           "automon.config", "automon.evaluation", "automon.training")
COLD_ENV = "AUTOMON_TEST_COLD"
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGQUIT)
_MAX_MSG = 1 << 20  # one request (argv, cwd, environment) in one SOCK_SEQPACKET message


class WarmPython:
    """Servers for this process (each xdist worker has its own), one per environment asked for (the
    `keep` most recently used are kept: each holds torch and friends, several hundred MB), and the one
    launcher that reaches them all, in a temporary directory: server <hash of its environment> listens
    on <hash>.sock, so a launcher finds the server of its own environment by name."""

    def __init__(self, honour_cold: bool = True, keep: int = 2) -> None:
        self._honour_cold = honour_cold  # False: AUTOMON_TEST_COLD=1 is ignored (tests of this module)
        self._keep = keep
        self._servers: OrderedDict[str, _Server] = OrderedDict()
        self._dir: tempfile.TemporaryDirectory | None = None
        self._lock = threading.Lock()

    def available(self) -> bool:
        return (not (self._honour_cold and os.environ.get(COLD_ENV) == "1") and hasattr(os, "fork")
                and hasattr(socket, "send_fds") and sys.platform == "linux")

    def launcher(self, *envs: dict[str, str]) -> str | None:
        """An executable to run in place of `python`, with a server started (and waited for) for each
        of `envs` that has none; None where warm runs are off or no server for `envs` could start. A
        run in any other environment is run fresh by the launcher (and listed by `refused`)."""
        if not self.available():
            return None
        with self._lock:
            d = self._directory()
            served = False
            for env in envs:
                key = _key(env)
                server = self._servers.pop(key, None)
                if server is not None and not server.alive():
                    server.close()
                    server = None
                if server is None:
                    try:
                        server = _Server(env, d)
                    except (OSError, RuntimeError) as e:  # its runs are run fresh by the launcher: slower, not wrong
                        warnings.warn(f"no warm interpreter for an environment of this test run: {e}", stacklevel=2)
                        continue
                self._servers[key] = server  # most recently used last
                served = True
                while len(self._servers) > self._keep:
                    self._servers.popitem(last=False)[1].close()
            return str(d / "python") if served or not envs else None

    def run(self, argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """Like subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout),
        argv[0] being sys.executable and argv[1] the script. Warm when `env` is this process's own or
        one a server runs already; any other environment gets a fresh interpreter (a server's start-up
        would cost more than one run saves)."""
        launcher = None
        if self.available() and (_key(env) == _key(dict(os.environ)) or _key(env) in self._servers):
            launcher = self.launcher(env)
        cmd = list(argv) if launcher is None else [launcher, *argv[1:]]
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def served(self) -> int:
        """How many runs the live servers have forked (tests of this module check that runs went warm)."""
        return sum(s.served() for s in self._servers.values())

    def refused(self) -> list[str]:
        """The runs the launcher ran in a fresh interpreter, and why (one line each)."""
        try:
            return (Path(self._dir.name) / "refused").read_text().splitlines() if self._dir else []
        except OSError:
            return []

    def close(self) -> None:
        with self._lock:
            while self._servers:
                self._servers.popitem()[1].close()
            if self._dir is not None:
                self._dir.cleanup()
                self._dir = None

    def _directory(self) -> Path:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="warm-python-")
            # A Python script, not a shell one (a shell would add PWD to the run's environment).
            launcher = Path(self._dir.name) / "python"
            launcher.write_text(f"#!{sys.executable} -SE\nimport runpy, sys\n"
                                f"sys.argv[1:1] = ['--client', {self._dir.name!r}, {sys.executable!r}]\n"
                                f"runpy.run_path({os.path.abspath(__file__)!r}, run_name='__main__')\n")
            launcher.chmod(0o755)
        return Path(self._dir.name)


class _Server:
    """One server process, serving the runs of one environment on <directory>/<hash>.sock."""

    def __init__(self, env: dict[str, str], directory: Path) -> None:
        self._count = directory / f"{_name(_key(env))}.served"
        self.proc = subprocess.Popen([sys.executable, __file__, str(directory)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd=directory)
        ready, _, _ = select.select([self.proc.stdout], [], [], 300)
        line = os.read(self.proc.stdout.fileno(), 4096) if ready else b""
        if line.strip() != b"ready":
            self.close()
            raise RuntimeError(f"the warm interpreter did not start (exit {self.proc.poll()}, said {line!r})")
        if not self._count.with_suffix(".sock").exists():  # the server's own hash of its environment
            self.close()
            raise RuntimeError("the warm interpreter does not see the environment it was given")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def served(self) -> int:
        try:
            return int(self._count.read_text() or 0)
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        """End the server (it ends at EOF on its stdin, killing the runs still going)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# Not part of a server's key (the run gets its whole environment all the same): pytest's per-test
# bookkeeping, and what importing torch / transformers sets in os.environ itself, so that a test process
# that asks for a run after those imports finds the server it started before them (a second server
# would cost another preload, ~6 s of CPU). Those three are read once the preloaded modules are loaded
# in any case: the OpenMP ones when the runtime starts (in the server, as in a fresh interpreter that
# imports the same modules), the inductor cache directory when a run compiles (from the run's own
# environment).
_NOT_KEYED = ("PYTEST_CURRENT_TEST", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR")


def _key(env: dict[str, str]) -> str:
    """The environment as the preloaded imports would see it (all of it but _NOT_KEYED)."""
    return json.dumps({k: v for k, v in env.items() if k not in _NOT_KEYED}, sort_keys=True)


def _name(key: str) -> str:
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# ---------------------------------------------------------------- the server and its runs

def _std_streams() -> None:
    """sys.stdin/stdout/stderr over the run's descriptors 0-2, made as a fresh interpreter makes them:
    stdout line-buffered on a terminal, stderr always; both write-through under PYTHONUNBUFFERED."""
    import io

    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    streams = []
    for fd, mode in ((0, "rb"), (1, "wb"), (2, "wb")):
        old = (sys.stdin, sys.stdout, sys.stderr)[fd]
        raw = io.FileIO(fd, mode, closefd=False)
        buf = raw if unbuffered and fd else (io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw))
        streams.append(io.TextIOWrapper(buf, encoding=old.encoding, errors=old.errors,
                                        line_buffering=not unbuffered and fd > 0 and (fd == 2 or raw.isatty()),
                                        write_through=unbuffered and fd > 0))
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams


def _child(req: dict, fds: list[int], keep_out: list[int]) -> None:
    """The forked run; never returns."""
    status = 1
    try:
        for fd in keep_out:  # the server's socket and the other runs' connections
            os.close(fd)
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        _std_streams()
        import atexit
        import logging
        import random
        import weakref

        # What the server's imports made (wandb's media directory, a TemporaryDirectory with an atexit
        # cleanup) is the server's, shared by every run: its exit handlers and finalizers are not this
        # run's to call (the first run to end removed that directory under the others). The run's own
        # still run at its exit, and so does logging's shutdown, which flushes the handlers the run made.
        atexit._clear()
        atexit.register(logging.shutdown)
        for inherited in list(weakref.finalize._registry):
            inherited.atexit = False
        weakref.finalize._registered_with_atexit = False  # the run's first finalizer registers the hook again
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
            status = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
        threading._shutdown()  # what the interpreter does at exit, in its order
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing left to flush
                pass
        if status < 0:  # an uncaught KeyboardInterrupt: the interpreter dies of SIGINT, so does the run
            signal.signal(-status, signal.SIG_DFL)
            os.kill(os.getpid(), -status)
        os._exit(status & 0xFF)


def _not_served(argv: list[str], cwd: str) -> str | None:
    """Why a run is not a server's (the launcher then runs it in a fresh interpreter)."""
    if not argv or argv[0].startswith("-") or not os.path.isfile(os.path.join(cwd, argv[0])):
        return "not a script"  # `-c`, `-m`, ...: only `python script.py ...` is served
    return None


def _serve(directory: str) -> None:
    own = _key(dict(os.environ))  # before the imports, which may set variables of their own
    name = Path(directory) / _name(own)
    control = 0  # the WarmPython's pipe: EOF ends the server
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a library's stray print must not land in the replies
    import importlib

    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:  # not installed here: the runs import what they need themselves
            pass
    # What the imports made is kept for good: frozen, the runs' garbage collections never walk it (the
    # full ones walked its ~500,000 objects again and again in every run: about 0.9 s of a 6 s tiny
    # training run here), and its pages stay shared with the server.
    gc.collect()
    gc.freeze()
    gpu_refusal = _cuda_unusable_in_forks()
    name.with_suffix(".env").write_text(own)  # for the launcher's note of a run it cannot find a server for
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(str(name.with_suffix(".sock")))
    srv.listen(64)
    replies.write(b"ready\n")
    runs: dict[socket.socket, int] = {}  # connection -> its run's pid
    served = 0
    try:
        while True:
            ready, _, _ = select.select([control, srv, *runs], [], [], 0.05)
            for conn, pid in list(runs.items()):  # ended runs: their status to their launcher
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    _send(conn, {"status": os.waitstatus_to_exitcode(status)})
                    conn.close()
                    del runs[conn]
            for r in ready:
                if isinstance(r, int):  # the control pipe
                    if not os.read(control, 4096):
                        return
                elif r is srv:
                    conn, _ = srv.accept()
                    try:
                        msg, fds, _, _ = socket.recv_fds(conn, _MAX_MSG, 3)
                        req = json.loads(msg)
                    except (OSError, ValueError):
                        conn.close()
                        continue
                    why = ("no descriptors" if len(fds) != 3 else "another environment" if _key(req["env"]) != own
                           else gpu_refusal or _not_served(req["argv"], req["cwd"]))
                    if why:  # the launcher asked the wrong server: it runs the script itself
                        _send(conn, {"cold": why})
                        for fd in fds:
                            os.close(fd)
                        conn.close()
                        continue
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        _child(req, fds, [srv.fileno(), control, replies.fileno(), conn.fileno(),
                                          *(c.fileno() for c in runs)])
                    for fd in fds:
                        os.close(fd)
                    runs[conn] = pid
                    served += 1
                    name.with_suffix(".served").write_text(str(served))
                    _send(conn, {"pid": pid})
                elif r in runs:  # its launcher went away (killed): so does the run
                    try:
                        gone = not r.recv(1)
                    except OSError:
                        gone = True
                    if gone:
                        _kill_group(runs[r])
    finally:
        for pid in runs.values():
            _kill_group(pid)
        for pid in runs.values():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _cuda_unusable_in_forks() -> str | None:
    """Why no run can be forked from this server, if CUDA would fail in it: a CUDA build of torch marks
    its forks bad ("Cannot re-initialize CUDA in forked subprocess") once the parent has asked the driver
    anything, and the preloaded imports may ask (is_available() counts devices). One trial fork says."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.backends.cuda.is_built():
        return None
    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return "CUDA was touched before the fork: a forked run could not use the GPU" if status else None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the run leads a session (and group) of its own
    except OSError:
        pass


def _send(conn: socket.socket, msg: dict) -> None:
    try:
        conn.send(json.dumps(msg).encode())
    except OSError:
        pass


# ---------------------------------------------------------------- the launcher's client

def _client(argv: list[str]) -> None:
    """`--client DIRECTORY PYTHON script args...`: the run, warm if a server of this environment takes
    it, else exec'd fresh (and noted in DIRECTORY/refused, with how the environment differs from the
    servers')."""
    directory, python, args = Path(argv[0]), argv[1], argv[2:]
    key = _key(dict(os.environ))
    # Signals are caught from here on: those that come before the run's pid is known are passed on
    # when it is (else one sent right after the run started would kill the launcher, and so the run).
    run: list[int] = []
    pending: list[int] = []

    def forward(signum, frame) -> None:  # noqa: ARG001
        if not run:
            pending.append(signum)
            return
        try:
            os.kill(run[0], signum)
        except OSError:
            pass

    for sig in _FORWARDED:
        signal.signal(sig, forward)

    def fresh(why: str) -> None:
        try:
            if why.startswith("no server"):
                others = [json.loads(p.read_text()) for p in directory.glob("*.env")]
                mine = json.loads(key)
                why += "; it differs in " + " / ".join(
                    ", ".join(sorted(k for k in set(o) | set(mine) if o.get(k) != mine.get(k))) for o in others)
            with open(directory / "refused", "a") as f:
                f.write(f"{' '.join(args)[:200]}: {why}\n")
        except (OSError, ValueError):
            pass
        for sig in _FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        if pending:  # what a fresh interpreter not yet started would have got
            os.kill(os.getpid(), pending[0])
        os.execv(python, [python, *args])

    why = _not_served(args, os.getcwd())
    if why:
        fresh(why)
    req = json.dumps({"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(str(directory / f"{_name(key)}.sock"))
    except OSError:
        fresh("no server for its environment")
    try:
        socket.send_fds(s, [req], [0, 1, 2])
        reply = json.loads(s.recv(_MAX_MSG) or b'{"cold": "the server went away"}')
    except (OSError, ValueError) as e:
        reply = {"cold": f"the server did not answer: {e}"}
    if "cold" in reply:
        s.close()
        fresh(reply["cold"])
    run.append(reply["pid"])
    for signum in pending:
        forward(signum, None)
    msg = s.recv(_MAX_MSG)
    if not msg:
        print("[warm_python: the server ended before the run did]", file=sys.stderr)
        os._exit(1)
    status = json.loads(msg)["status"]
    if status < 0:  # died of a signal: so does the launcher
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # the two whose action cannot be set
            signal.signal(-status, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-status])
        os.kill(os.getpid(), -status)
        time.sleep(5)
        os._exit(128 - status)
    os._exit(status)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        _client(sys.argv[2:])
    else:
        sys.path.pop(0)  # tests/ is no package of the runs'
        _serve(sys.argv[1])
