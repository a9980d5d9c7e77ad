"""What the programs' root is copied from (isolation.program_root): the list the zygote copies into its
tmpfs. test_sandbox.py runs the standard library from the copy; test_hostile.py shows no lookup in it
leaving a negative dentry on the host."""

from __future__ import annotations

import importlib.util
import os

from automon.sandbox import isolation


def test_links_on_the_way_to_a_library_are_kept(tmp_path):
    """/lib -> usr/lib and libz.so.1 -> libz.so.1.2.13 both resolve in the copy as on the host."""
    tmp_path = tmp_path.resolve()  # no link of its own on the way
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / "libz.so.1.2.13").write_bytes(b"\x7fELF")
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "usr" / "lib" / "libz.so.1").symlink_to("libz.so.1.2.13")
    out = {}
    real = isolation._resolved(f"{tmp_path}/lib/libz.so.1", out)
    assert real == f"{tmp_path}/usr/lib/libz.so.1.2.13"
    assert out == {f"{tmp_path}/lib": ("link", "usr/lib", f"{tmp_path}/lib"),
                   f"{tmp_path}/usr/lib/libz.so.1": ("link", "libz.so.1.2.13", f"{tmp_path}/usr/lib/libz.so.1")}


def test_the_root_holds_the_standard_library_and_its_libraries_only():
    entries = isolation.program_root()
    files = {e[1] for e in entries if e[0] == "file"}
    made = set()
    for e in entries:  # each parent before what it holds, every file still there
        path = e[-1]
        assert os.path.dirname(path) in made or os.path.dirname(path) == "/", path
        if e[0] == "dir":
            made.add(path)
        assert e[0] != "file" or os.path.isfile(path)
    assert os.__file__ in files and importlib.util.cache_from_source(os.__file__) in files
    assert any(os.path.basename(f).startswith("libc.so") for f in files)
    stdlib = os.path.dirname(os.__file__)
    for left_out in ("test", "idlelib", "ensurepip", "tkinter", "site-packages"):
        assert not any(f.startswith(f"{stdlib}/{left_out}/") for f in files), left_out
    assert not any(f.endswith((".opt-1.pyc", ".opt-2.pyc")) for f in files)


def test_a_venv_under_tmp_runs_programs():
    """A checkout (and its .venv) under /tmp: the root once held the venv's own lib/python3.11 and the
    directories on the way to it, /tmp among them, and the zygote could not make the programs' /tmp
    (no sandbox started: a fresh clone in a temp directory failed its sandbox and build tests)."""
    import subprocess
    import sys
    import tempfile

    from support import REPO

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        subprocess.run([isolation.interpreter(), "-m", "venv", "--without-pip", f"{tmp}/.venv"], check=True)
        code = ("import sys; from automon.sandbox import Sandbox\n"
                "for mode in sys.argv[1:]:\n"
                "    with Sandbox(workers=1, isolation=mode) as sb:\n"
                "        print(mode, sb.run('import fractions; print(fractions.Fraction(2, 6))').stdout.strip())\n")
        modes = [m for m in ("bwrap", "unshare") if m in _modes_here()]
        r = subprocess.run([f"{tmp}/.venv/bin/python", "-c", code, *modes], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == [f"{m} 1/3" for m in modes]


def _modes_here() -> list[str]:
    from automon.sandbox import Sandbox, SandboxError

    out = []
    for mode in ("bwrap", "unshare"):
        try:
            with Sandbox(workers=1, isolation=mode) as sb:
                if sb.isolation == mode:
                    out.append(mode)
        except SandboxError:
            pass
    return out


def test_a_python_with_files_where_the_sandbox_mounts_its_own_is_refused(tmp_path, monkeypatch):
    """Files of the programs' Python under /tmp, /proc or /dev would be covered by the programs' own
    mounts there: no sandbox, with an error that says so (the next mode, or one line), not a zygote's
    traceback."""
    import pytest

    locale = tmp_path / "locale"
    locale.mkdir()
    (locale / "LC_CTYPE").write_bytes(b"")
    monkeypatch.setattr(isolation, "_LOCALE", str(locale))
    monkeypatch.setattr(isolation, "_MOUNTED_OVER", (str(tmp_path), "/proc", "/dev"))
    isolation._program_root.cache_clear()
    try:
        with pytest.raises(isolation.IsolationUnavailable, match="where the sandbox mounts"):
            isolation.program_root()
    finally:
        isolation._program_root.cache_clear()
