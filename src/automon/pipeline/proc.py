"""Running a stage's command line: output to a log file (and the console), signals passed on."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Sequence

_lock = threading.Lock()
_children: set[subprocess.Popen] = set()
_stopped: list[int] = []


class Stopped(Exception):
    """The pipeline got SIGTERM/SIGINT/SIGUSR1; the running stages were asked to stop too."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signal.Signals(signum).name}")
        self.signum = signum


def _forward(signum, frame) -> None:  # noqa: ARG001
    """Pass the signal to every running stage (training then saves a checkpoint and exits)."""
    _stopped.append(signum)
    with _lock:
        for p in list(_children):
            try:
                p.send_signal(signum)
            except OSError:
                pass


def say(line: str) -> None:
    """Print one line without interleaving with the stages' echoed output."""
    with _lock:
        print(line, flush=True)


def install_signal_forwarding() -> None:
    # SIGINT too: the stages run in sessions of their own (run_logged), so Ctrl-C reaches them once, from
    # here: training checkpoints and stops, the others stop with one line; the pipeline then stops.
    for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(s, _forward)


def check_stopped() -> None:
    if _stopped:
        raise Stopped(_stopped[0])


def stopped_by() -> str | None:
    """The signal that stopped the pipeline (SIGINT, ...), None while none has."""
    return signal.Signals(_stopped[0]).name if _stopped else None


def run_logged(argv: Sequence[str], env: dict[str, str], log_path: Path, echo: bool, prefix: str) -> int:
    """Run `argv`, appending its output to `log_path` and echoing it with `prefix`. Returns the exit status."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = shlex.join(argv)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {cmd}\n")
        log.flush()
        p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             text=True, errors="replace", bufsize=1, start_new_session=True)
        with _lock:
            _children.add(p)
        try:
            assert p.stdout is not None
            for line in p.stdout:
                log.write(line)
                if echo:
                    with _lock:
                        sys.stdout.write(prefix + line)
                        sys.stdout.flush()
            return p.wait()
        finally:
            with _lock:
                _children.discard(p)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def base_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in extra.items()})
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
