"""The sandbox's ordinary behaviour: CPython exit semantics, limits (wall, CPU, memory), no network,
temp-dir cleanup, output capture, ordering. One pool serves most tests (starting one costs ~0.1 s).
Hostile programs (escapes, forged verdicts) are in test_hostile.py."""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from automon.sandbox import ISOLATION_BWRAP, ISOLATION_NONE, ISOLATION_UNSHARE, Limits, Sandbox
from automon.sandbox.isolation import WORKER_FILE


@pytest.fixture(scope="module")
def sb():
    with Sandbox(Limits(timeout_s=2, memory_mb=256), workers=2) as box:
        yield box


# Programs whose exit status and output the sandbox must report exactly as `python prog.py` does.
PARITY = {
    "ok": "print('hi')",
    "exit_code": "import sys\nprint('before')\nsys.exit(3)",
    "exit_none": "raise SystemExit",
    "exit_message": "import sys\nsys.exit('bye')",
    "exit_wraps": "import sys\nsys.exit(256 + 7)",
    "assert_fails": "assert 1 == 2, 'nope'",
    "exception": "def f():\n    return 1 / 0\nf()",
    "syntax_error": "def f(:\n    pass",
    "hook_exits_0": "import sys\ndef h(*a):\n    raise SystemExit(0)\nsys.excepthook = h\nassert False",
    "hook_os_exit": "import os, sys\ndef h(t, v, tb):\n    os._exit(0) if issubclass(t, AssertionError) else None\n"
                    "sys.excepthook = h\nassert False",
    "hook_raises": "import sys\ndef h(*a):\n    raise ValueError('x')\nsys.excepthook = h\nassert False",
    "atexit": "import atexit\natexit.register(lambda: print('bye'))\nprint('hi')",
    "thread_joined": "import threading, time\n"
                     "threading.Thread(target=lambda: (time.sleep(0.1), print('late'))).start()",
    "buffered_lost_on_os_exit": "import os\nprint('lost', end='')\nos._exit(4)",
    "main_guard": "if __name__ == '__main__':\n    print('main')",
}


def test_exit_semantics_match_cpython(sb, tmp_path):
    names = list(PARITY)
    got = sb.run_many([PARITY[n] for n in names])
    for name, r in zip(names, got):
        path = tmp_path / f"{name}.py"
        path.write_text(PARITY[name])
        ref = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path,
                             env={"PATH": os.environ["PATH"], "PYTHONHASHSEED": "0", "PYTHONUTF8": "1"})
        assert r.status == "exited", name
        assert (r.exit_code, r.stdout) == (ref.returncode, ref.stdout), name
        # Same last stderr line (the exception), modulo the file name in tracebacks.
        last = [ln for ln in ref.stderr.splitlines() if ln.strip()][-1:] or [""]
        assert ([ln for ln in r.stderr.splitlines() if ln.strip()][-1:] or [""]) == last, name


def test_tracebacks_quote_the_program(sb):
    r = sb.run("def f():\n    assert 1 == 2\nf()")
    assert 'File "<program>", line 2, in f' in r.stderr and "assert 1 == 2" in r.stderr
    frames = [ln.strip() for ln in r.stderr.splitlines() if ln.strip().startswith("File ")]
    assert frames and all(f.startswith('File "<program>"') for f in frames)  # no frame of the sandbox's own


def test_programs_cannot_import_from_the_sandbox_dir_or_the_callers_cwd(sb, tmp_path, monkeypatch):
    """Workers run worker.py as a script, yet neither its directory nor the caller's cwd is on a
    program's sys.path (either would let their modules shadow what a program imports)."""
    (tmp_path / "shadowing.py").write_text("print('imported from the cwd')")
    monkeypatch.chdir(tmp_path)
    with Sandbox(Limits(timeout_s=2), workers=1) as box:  # workers started from tmp_path
        r = box.run("import sys\nprint(sys.path)\nimport shadowing")
    path = ast.literal_eval(r.stdout.splitlines()[0])
    assert os.path.dirname(WORKER_FILE) not in path and "/sandbox" not in path
    assert "" not in path and str(tmp_path) not in path
    assert "ModuleNotFoundError: No module named 'shadowing'" in r.stderr
    for own in ("worker", "zygote", "grader", "limits", "protocol", "codec", "channel", "execute", "confine",
                "watch"):  # the sandbox's own modules are not importable
        assert sb.run(f"import {own}").exit_code == 1, own


# The standard library as a program uses it, from the programs' root (a copy: isolation.program_root):
# modules whose extension loads a library of its own, the locale the sandbox sets, time zones.
STDLIB = """
import bz2, ctypes, decimal, hashlib, importlib.util, locale, lzma, os, sqlite3, ssl, uuid, zlib, zoneinfo
import xml.etree.ElementTree as ET
from datetime import datetime
print(bz2.decompress(bz2.compress(b"ab")), lzma.decompress(lzma.compress(b"ab")), zlib.crc32(b"ab"))
print(hashlib.sha256(b"ab").hexdigest()[:8], hashlib.md5(b"ab").hexdigest()[:8], ssl.OPENSSL_VERSION[:7])
print(sqlite3.connect(":memory:").execute("select 6 * 7").fetchone(), decimal.Decimal(1) / 7)
print(uuid.UUID(int=5), ET.fromstring("<a><b/></a>")[0].tag, ctypes.sizeof(ctypes.c_int))
print(locale.setlocale(locale.LC_ALL, ""), datetime(2024, 7, 1, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")).utcoffset())
print(os.path.exists(importlib.util.cache_from_source(decimal.__file__)))  # its bytecode is there: no recompiling
"""


def test_the_standard_library_works_in_the_programs_root(sb):
    r = sb.run(STDLIB)
    ref = subprocess.run([sys.executable, "-S", "-c", STDLIB], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8"})
    assert r.ok and r.stdout == ref.stdout, r.stdout + r.stderr + ref.stderr
    assert r.stdout.splitlines()[-1] == "True"
    for left_out in ("test.support", "idlelib", "ensurepip", "tkinter"):  # not what a program is graded on
        assert sb.run(f"import {left_out}").exit_code == 1, left_out


def test_wall_timeout_kills_busy_and_sleeping_programs(sb):
    t0 = time.monotonic()
    busy, sleeping = sb.run_many(["while True: pass", "import time\ntime.sleep(60)"],
                                 Limits(timeout_s=0.5, memory_mb=256))
    assert busy.status == sleeping.status == "timeout" and not busy.ok
    assert time.monotonic() - t0 < 30  # the 60 s sleep was cut short (a bound no loaded machine reaches)


def test_cpu_limit_stops_busy_loops_independently_of_wall_time(sb):
    busy, light = sb.run_many(["while True: pass", "import time\ntime.sleep(0.5)\nprint('done')"],
                              Limits(timeout_s=20, memory_mb=256, cpu_s=0.3))
    # Contained, the program is its PID namespace's init, which its own SIGPROF does not end: the
    # zygote's count of the tree's CPU time does (SIGXCPU). Either says it was not the wall limit.
    assert busy.status == "signaled" and busy.signal == signal.SIGXCPU
    assert 0.25 < busy.cpu_s < 1.5  # CPU time: the same on a loaded machine
    assert light.ok and light.stdout == "done\n"  # sleeping uses no CPU time


def test_memory_limit(sb):
    r = sb.run("x = bytearray(1 << 30)\nprint('allocated')")
    assert r.exit_code == 1 and "MemoryError" in r.stderr and "allocated" not in r.stdout
    assert sb.run("x = bytearray(50 << 20)\nprint(len(x))").stdout == f"{50 << 20}\n"
    # Files are bounded too (the run directory is in RAM): they count against the tree's memory
    # (contained), and no file grows past memory_mb (Python ignores SIGXFSZ: EFBIG).
    big = sb.run("with open('f', 'wb') as f:\n    for _ in range(300):\n        f.write(bytes(1 << 20))")
    assert not big.ok and ("File too large" in big.stderr or "over the memory limit" in big.stderr), big


@pytest.fixture()
def listener():
    """A TCP server on localhost that a sandboxed program must not reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    yield srv.getsockname()[1]
    srv.close()


CONNECT = """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    print("connected")
except OSError as e:
    print("blocked", e)
"""


def test_no_network(sb, listener):
    assert sb.isolation in (ISOLATION_BWRAP, ISOLATION_UNSHARE)
    # Control: the same code outside the sandbox does connect.
    ref = subprocess.run([sys.executable, "-c", CONNECT.format(port=listener)], capture_output=True, text=True)
    assert ref.stdout.startswith("connected")
    assert sb.run(CONNECT.format(port=listener)).stdout.startswith("blocked")


def test_isolation_none_runs_uncontained_when_asked_for_by_name(listener, caplog):
    with Sandbox(Limits(timeout_s=2), workers=1, isolation=ISOLATION_NONE) as box:
        assert box.isolation == ISOLATION_NONE
        r = box.run(CONNECT.format(port=listener))
    assert r.stdout.startswith("connected")  # what none means: the network is the caller's
    assert "SANDBOX ISOLATION IS OFF" in caplog.text


def test_fresh_temp_dir_removed_afterwards(sb):
    prog = ("import os, tempfile\nprint(os.getcwd())\nprint(tempfile.gettempdir())\nprint(os.listdir('.'))\n"
            "os.makedirs('a/b')\nopen('a/b/f.txt', 'w').write('x' * 1000)\n")
    first, second = sb.run_many([prog, prog])
    cwd1, tmp1, listing1 = first.stdout.splitlines()
    cwd2, _, listing2 = second.stdout.splitlines()
    # Each program's /tmp is a tmpfs of its own: the second does not see the first's files.
    assert tmp1 == cwd1 and listing1 == listing2 == "[]"
    assert not os.path.exists(os.path.join(cwd1, "a"))  # nor does the caller


def test_isolation_none_still_watches_and_ends_the_whole_tree():
    """Uncontained, a program's tree is every descendant of the zygote (a child subreaper): a
    `setsid` + double fork does not outlive the run, and the tree's memory is summed."""
    tag = f"amnone{os.getpid() % 10000}"
    daemon = f"""
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b"{tag}", 0, 0, 0)  # PR_SET_NAME
        time.sleep(60)
    os._exit(0)
time.sleep(0.3)
print("parent done")
"""
    hog = """
import os, time
for _ in range(3):
    if os.fork() == 0:
        x = bytearray(150 << 20)  # under the per-process limit, over it together
        time.sleep(5)
        os._exit(0)
time.sleep(5)
print("all allocated")
"""
    with Sandbox(Limits(timeout_s=10, memory_mb=256), workers=1, isolation=ISOLATION_NONE) as box:
        d, h = box.run_many([daemon, hog])
    time.sleep(0.3)
    alive = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/comm") as f:
                alive += [p] if f.read().strip() == tag else []
        except OSError:
            pass
    assert d.ok and d.stdout == "parent done\n" and alive == []
    assert not h.ok and "over the memory limit" in h.stderr, h


def test_isolation_none_removes_a_deep_directory():
    """What a program leaves in its directory is removed, however deep (the removal recursed, and
    a 1,500-deep tree stopped the worker)."""
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')"
    with Sandbox(Limits(timeout_s=10), workers=1, isolation=ISOLATION_NONE) as box:
        first, second = box.run_many([deep, "import os\nprint(os.listdir('..'))"])
    assert first.stdout == "deep\n" and second.ok, (first, second)


def test_pool_removes_its_base_dir():
    """Uncontained, programs run in directories of a pool's own base dir, removed at close."""
    with Sandbox(Limits(timeout_s=2), workers=1, isolation=ISOLATION_NONE) as box:
        cwd = box.run("import os\nopen('left', 'w').write('behind')\nprint(os.getcwd())").stdout.strip()
        base = os.path.dirname(os.path.dirname(cwd))
        assert os.path.isdir(base) and not os.path.exists(cwd)
    assert not os.path.exists(base)


def test_output_is_truncated_keeping_head_and_tail():
    with Sandbox(Limits(timeout_s=5, output_bytes=1000), workers=1) as box:
        r = box.run("print('HEAD' + 'x' * 200000)\nprint('TAIL')")
    assert r.ok and len(r.stdout) < 1100
    assert r.stdout.startswith("HEAD") and r.stdout.endswith("TAIL\n") and "[truncated]" in r.stdout


def test_a_child_holding_the_output_pipe_does_not_hold_up_the_run(sb):
    """A program that forks a long sleeper holding the output pipe: the run still ends promptly
    (that the sleeper is killed is test_hostile.py's daemon test)."""
    prog = "import os, time\npid = os.fork()\nif pid == 0:\n    time.sleep(30)\nprint(pid, flush=True)"
    t0 = time.monotonic()
    r = sb.run(prog)
    assert r.ok and int(r.stdout) > 0 and time.monotonic() - t0 < 20  # not the sleeper's 30 s


def test_results_in_input_order(sb):
    progs = [f"import time\ntime.sleep({0.05 * (i % 3)})\nprint({i})" for i in range(24)]
    assert [r.stdout for r in sb.run_many(progs)] == [f"{i}\n" for i in range(24)]


def test_programs_do_not_share_state(sb):
    a, b = sb.run_many(["import sys\nsys.modules['json'] = None\nX = 1\nprint('ok')",
                        "import json\nprint('X' in globals(), json.dumps(1))"])
    assert a.ok and b.stdout == "False 1\n"


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        Sandbox(workers=0)
    with pytest.raises(ValueError, match="auto, bwrap, unshare, none"):
        Sandbox(isolation="off")


@pytest.mark.parametrize("mode", [ISOLATION_BWRAP, ISOLATION_UNSHARE, ISOLATION_NONE])
def test_limits_too_small_for_any_program_are_the_programs_failure(mode):
    """A limit no program can run under (a microsecond, a megabyte) fails the programs; the pool
    still starts (its probe has limits of its own) instead of calling the isolation unavailable."""
    from automon.sandbox import SandboxError

    try:
        Sandbox(Limits(timeout_s=5), workers=1, isolation=mode).start()
    except SandboxError as e:
        pytest.skip(f"isolation {mode} cannot run here: {e}")
    for tiny in (Limits(timeout_s=1e-6), Limits(timeout_s=5, memory_mb=1)):
        with Sandbox(tiny, workers=1, isolation=mode) as box:
            assert box.isolation == mode
            r = box.run("x = bytearray(10 << 20)\nprint('ran')")
            assert not r.ok and r.stdout == "", (tiny, r)


def test_programs_get_a_minimal_environment_and_pinned_hashing(sb, monkeypatch):
    monkeypatch.setenv("AUTOMON_SECRET_TOKEN", "x")
    with Sandbox(Limits(timeout_s=2), workers=1) as fresh:  # workers started with the variable set
        env, = fresh.run_many(["import os\nprint(sorted(os.environ))"])
        other = fresh.run("print(list({'apple', 'pear', 'fig', 'kiwi', 'plum'}))")
    assert "AUTOMON_SECRET_TOKEN" not in env.stdout and "PYTHONHASHSEED" in env.stdout
    # Another pool (other worker processes) iterates a set of strings in the same order.
    assert sb.run("print(list({'apple', 'pear', 'fig', 'kiwi', 'plum'}))").stdout == other.stdout


POLLING = """
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from zygote import _Zygote
del os.pidfd_open  # as on Linux < 5.3
zygote = _Zygote("none", tempfile.mkdtemp(), None, [])
out = []
for program in ("print('x' * 100000)\\nraise SystemExit(2)", "import time\\ntime.sleep(5)"):
    fd = os.memfd_create("program")
    os.write(fd, program.encode())
    out.append(zygote.run({"limits": {"timeout_s": 0.5}, "graded": False}, [fd]))
print(json.dumps(out))
"""


def test_without_pidfd_the_zygote_polls():
    """Kernels before 5.3 (e.g. RHEL 8) lack pidfd_open; the zygote then polls wait4."""
    r = subprocess.run([sys.executable, "-c", POLLING, WORKER_FILE], capture_output=True, text=True, timeout=30)
    done, slept = json.loads(r.stdout)
    assert done[:3] == ["exited", 2, None] and len(done[3]) > 4000
    assert slept[0] == "timeout"


def test_one_jobs_tests_cannot_change_the_next_ones(sb):
    """Graders run one after another in the worker: what a test changes in the interpreter
    (builtins, recursion limit, argv, stdout) is restored before the next job's tests."""
    from automon.sandbox.grading import hidden_job, hidden_tests

    meddle = hidden_tests("import builtins, sys\nbuiltins.extra = 1\nsys.setrecursionlimit(60)\n"
                          "sys.argv = ['x']\nsys.stdout = None\nassert f(1) == 1\n", remote=("f",))
    check = hidden_tests("import builtins, sys\nassert not hasattr(builtins, 'extra') and sys.getrecursionlimit() > 60\n"
                         "assert sys.argv == [''] and f(2) == 2\nprint('clean')\n", remote=("f",))
    first, second = sb.run_jobs([hidden_job("def f(x):\n    return x\n", meddle),
                                 hidden_job("def f(x):\n    return x\n", check)] * 2)[:2]
    assert first.grader.ok and second.grader.ok and second.grader.stdout == "clean\n", second.grader


def test_a_grader_that_never_ends_times_out(sb):
    from automon.sandbox.grading import hidden_job, hidden_tests, hidden_verdict

    spin = hidden_tests("assert f(1) == 1\nwhile True:\n    pass\n", remote=("f",))
    t0 = time.monotonic()
    g = sb.run_jobs([hidden_job("def f(x):\n    return x\n", spin)], Limits(timeout_s=0.5, memory_mb=256))[0]
    assert g.grader.status == "timeout" and hidden_verdict(g) == (False, "timeout")
    assert time.monotonic() - t0 < 10
    assert sb.run("print('next')").stdout == "next\n"
