"""automon.data.forked: a forked child's value and error come back, and the child never outlives its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from automon.data.forked import Forked


def _boom(msg):
    raise ValueError(msg)


def test_the_value_and_the_exception_come_back():
    with Forked(pow, 2, 10) as f:
        value, secs = f.result()
    assert value == 1024 and secs >= 0
    with Forked(_boom, "no") as f, pytest.raises(ValueError, match="no") as err:
        f.result()
    assert any("in the forked" in n for n in err.value.__notes__)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_sigkilled_parent_takes_its_forked_child_and_the_childs_pool_with_it(tmp_path):
    """A SIGKILLed build's forked writer went on for seconds holding the build's lock (a fork inherits
    it), and a rerun at once stopped with "another build is writing" (CI, under load)."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import os, time
        from concurrent.futures import ProcessPoolExecutor
        from automon.data.forked import Forked, die_with_parent

        def pool_and_sleep():
            with ProcessPoolExecutor(1, initializer=die_with_parent, initargs=(os.getpid(),)) as ex:
                print("pool", ex.submit(os.getpid).result(), flush=True)
                time.sleep(60)

        with Forked(pool_and_sleep) as f:
            print("child", f._proc.pid, flush=True)
            time.sleep(60)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        pids = dict(proc.stdout.readline().split() for _ in range(2))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    deadline = time.monotonic() + 10
    left = [int(p) for p in pids.values()]
    while left and time.monotonic() < deadline:
        left = [p for p in left if _alive(p)]
        time.sleep(0.02)
    assert not left, f"still running 10 s after their parent's SIGKILL: {left} of {pids}"


def test_a_child_whose_parent_died_before_it_asked_to_die_with_it_leaves(tmp_path):
    """The prctl comes after the fork: a parent dead by then sends no signal, so the child checks."""
    from automon.data.forked import die_with_parent

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        die_with_parent(os.getppid() + 1_000_000)  # a parent it does not have: as if it had died
        os.write(w, b"survived")
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 100) == b"" and os.waitstatus_to_exitcode(status) == 1
    os.close(r)
