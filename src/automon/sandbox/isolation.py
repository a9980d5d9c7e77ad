"""How a sandbox worker is started, per isolation mode: the command line and the environment.

bwrap (bubblewrap, the default where it runs): every namespace unshared (user, PID, network, IPC,
UTS, cgroup), the worker and everything it forks run as uid/gid 65534 with no capabilities, on a
read-only file system that holds only the root entries (`root_entries`: /usr, its /bin and /lib*
links, the Python installation) and the worker's files, plus a small private /tmp, a private
/proc and a minimal /dev; `--die-with-parent` ends the sandbox with the process that started it,
`--new-session` detaches it from the terminal, `--clearenv` and an empty environment for bwrap
itself (its PID 1 keeps the environment it was started with) leave nothing of the caller's
environment inside.

unshare (util-linux; where bwrap is missing or cannot run): the same namespaces but cgroup, the
worker mapped to the caller's own uid; the worker and its grader (trusted code only) see the host's
file system with the caller's permissions, its programs do not.

In both, the worker's zygote then builds the file system its programs see from the same root
entries (confine.build_root): programs see the same minimal, read-only root in either mode.

none: no isolation, the caller's privileges. Only when asked for by name (`sandbox.isolation=none`).
"""

from __future__ import annotations

import os
import shutil
import sys

from automon.sandbox.limits import ISOLATION_BWRAP, ISOLATION_NONE, ISOLATION_UNSHARE

MODES = (ISOLATION_BWRAP, ISOLATION_UNSHARE, ISOLATION_NONE)
SANDBOX_UID = 65534  # "nobody"
WORKER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
# The worker and the modules it imports (standard library only), shown read-only in /sandbox.
WORKER_FILES = ("worker.py", "zygote.py", "grader.py", "limits.py", "protocol.py", "codec.py", "channel.py",
                "execute.py", "confine.py", "watch.py")
WORKER_PATH = "/sandbox/worker.py"
# Python flags: no site (no site-packages: programs get the standard library only), no user site,
# no script directory or cwd on sys.path, no bytecode written.
PY_FLAGS = ["-P", "-s", "-S", "-B"]
# The only variables a worker (and every program) sees: hashing and text encoding pinned for
# reproducible output.
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONUTF8": "1", "PYTHONHASHSEED": "0",
       "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"}


class IsolationUnavailable(RuntimeError):
    """No isolation mode of those asked for can run here."""


def interpreter() -> str:
    """The real Python binary (a venv's python is a link to it; the venv itself stays outside)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def root_entries() -> list[list[str]]:
    """What a program's file system holds, read-only: /usr and the top-level links or directories
    of a usr-merged or classic layout, and the Python installation (["ro", path] or
    ["link", target, path])."""
    out = [["ro", "/usr"]]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            out.append(["link", os.readlink(path), path])
        elif os.path.isdir(path):
            out.append(["ro", path])
    py = interpreter()
    for path in sorted({os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(py))}):
        if not (path == "/usr" or path.startswith("/usr/")):
            out.append(["ro", path])
    return out


def bwrap_command(worker_file: str) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise IsolationUnavailable("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    py = interpreter()
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    for entry in root_entries():
        args += ["--ro-bind", entry[1], entry[1]] if entry[0] == "ro" else ["--symlink", entry[1], entry[2]]
    here = os.path.dirname(os.path.realpath(worker_file))
    for name in WORKER_FILES:
        args += ["--ro-bind", os.path.join(here, name), f"/sandbox/{name}"]
    # /proc, /dev and /tmp serve the worker and zygote (accounting, the device nodes bound into
    # the programs' root, the mount point of that root); programs see none of them.
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(1 << 20), "--tmpfs", "/tmp",
             "--remount-ro", "/", "--chdir", "/tmp"]
    for k, v in ENV.items():
        args += ["--setenv", k, v]
    return args + ["--", py, *PY_FLAGS, WORKER_PATH, "--worker"]


def unshare_command(worker_file: str) -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        raise IsolationUnavailable("util-linux unshare is not installed")
    return [unshare, "--user", "--map-current-user", "--pid", "--fork", "--kill-child", "--mount",
            "--mount-proc", "--net", "--ipc", "--uts", "--", interpreter(), *PY_FLAGS,
            os.path.realpath(worker_file), "--worker"]


def none_command(worker_file: str) -> list[str]:
    return [interpreter(), *PY_FLAGS, os.path.realpath(worker_file), "--worker"]


def command(mode: str, worker_file: str) -> list[str]:
    return {ISOLATION_BWRAP: bwrap_command, ISOLATION_UNSHARE: unshare_command,
            ISOLATION_NONE: none_command}[mode](worker_file)


def candidates(isolation: str) -> list[str]:
    """The modes to try, strongest first: "auto" tries bwrap, then unshare, and never falls back
    to none; a named mode is that mode only."""
    if isolation == "auto":
        return [ISOLATION_BWRAP, ISOLATION_UNSHARE]
    if isolation not in MODES:
        raise ValueError(f"sandbox isolation must be auto, {', '.join(MODES)}; got {isolation!r}")
    return [isolation]
