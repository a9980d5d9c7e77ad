"""How a sandbox worker is started, per isolation mode: the command line and the environment.

bwrap (bubblewrap, the default where it runs): every namespace unshared (user, PID, network, IPC,
UTS, cgroup), the worker and everything it forks run as uid/gid 65534 with no capabilities, on a
read-only file system that holds only the worker's entries (`root_entries`: /usr, its /bin and
/lib* links, the Python installation) and the worker's files, plus a small private /tmp, a private
/proc and a minimal /dev; `--die-with-parent` ends the sandbox with the process that started it,
`--new-session` detaches it from the terminal, `--clearenv` and an empty environment for bwrap
itself (its PID 1 keeps the environment it was started with) leave nothing of the caller's
environment inside.

unshare (util-linux; where bwrap is missing or cannot run): the same namespaces but cgroup, the
worker mapped to the caller's own uid; the worker and its grader (trusted code only) see the host's
file system with the caller's permissions, its programs do not.

In both, the worker's zygote then builds the file system its programs see (confine.build_root): a
tmpfs of its own holding a copy of what `program_root` lists (the standard library, the libraries its
extension modules load), nothing of the host's file systems bound into it; programs see the same
minimal, read-only root in either mode.

none: no isolation, the caller's privileges. Only when asked for by name (`sandbox.isolation=none`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig

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
    """What bwrap's file system holds for the worker (trusted code; its zygote copies the programs'
    root from it), read-only: /usr and the top-level links or directories of a usr-merged or classic
    layout, and the Python installation (["ro", path] or ["link", target, path])."""
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


# Left out of the programs' copy of the standard library: its own test suites, IDLE, the pip
# bootstrapper, Tk (no display; its extension module alone pulls in X11's libraries), the build
# configuration (a static libpython of 44 MB) and third-party packages (-S: never on sys.path).
_STDLIB_SKIP_DIRS = ("test", "tests", "idle_test", "idlelib", "ensurepip", "tkinter", "turtledemo", "site-packages")
_DYNLOAD_SKIP = ("_test", "_ctypes_test", "_xxtestfuzz", "xxlimited", "xxsubtype", "_tkinter")
# The locale the sandbox's LANG names (locale.setlocale(LC_ALL, "") reads it); zoneinfo's time zones
# come from the interpreter's TZPATH.
_LOCALE = "/usr/lib/locale/C.utf8"
# Where confine.build_root puts directories of its own (and each program its own tmpfs on /tmp): nothing of
# the root can live there.
_MOUNTED_OVER = ("/tmp", "/proc", "/dev")


def program_root() -> list[list[str]]:
    """What the programs' root holds (confine.build_root copies it, at the same paths, into a tmpfs
    of the zygote's): the Python installation's standard library (pure-Python modules, their
    compiled bytecode of this interpreter, its extension modules) without the parts in
    _STDLIB_SKIP_DIRS and _DYNLOAD_SKIP, every shared library those extension modules load (as the
    dynamic loader finds them), the C.UTF-8 locale and zoneinfo's time zones. ["dir", path], ["file", path] or
    ["link", target, path], in an order that creates each parent first. No host file system is
    mounted in that root (its device nodes aside), so no lookup a program makes reaches one and
    leaves a negative dentry there (docs/security.md). Computed once per process."""
    return [list(e) for e in _program_root()]


@functools.lru_cache(maxsize=1)
def _program_root() -> tuple[tuple[str, ...], ...]:
    out: dict[str, tuple[str, ...]] = {}
    tag = sys.implementation.cache_tag

    def keep(name: str, is_dir: bool, top: str) -> bool:
        if is_dir:
            return name not in _STDLIB_SKIP_DIRS and not name.startswith("config-")
        if name.endswith(".pyc"):  # the bytecode this interpreter reads, not the optimised levels'
            return name.endswith(f".{tag}.pyc")
        return not (top.endswith("lib-dynload") and name.startswith(_DYNLOAD_SKIP))

    # The base installation's: in a venv, platstdlib is the venv's own lib/pythonX.Y (site-packages only),
    # whose path would put the checkout's directories into the root (one under /tmp broke it, below).
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    for top in dict.fromkeys(_resolved(paths[name], out) for name in ("stdlib", "platstdlib")):
        _tree(top, out, keep)
    modules = sorted(p for p, e in out.items() if e[0] == "file" and p.endswith(".so"))
    for lib in _libraries(modules):
        real = _resolved(lib, out)
        out[real] = ("file", real)
    tzpath = sysconfig.get_config_var("TZPATH") or ""
    for top in [_LOCALE, *tzpath.split(os.pathsep)]:
        if top and os.path.isdir(top):
            _tree(_resolved(top, out), out, lambda name, is_dir, _: True)
    covered = sorted(p for p in out if any(p == m or p.startswith(m + "/") for m in _MOUNTED_OVER))
    if covered:
        raise IsolationUnavailable(f"the programs' Python has files under {covered[0]}, where the sandbox mounts "
                                   "its programs' own /tmp, /proc or /dev: use a Python installed elsewhere")
    dirs = {os.path.dirname(p) for p in out} | {p for p, e in out.items() if e[0] == "dir"}
    for d in list(dirs):
        while d not in ("/", ""):
            dirs.add(d)
            d = os.path.dirname(d)
    entries = [("dir", d) for d in sorted(dirs - {"/"}) if d not in out or out[d][0] == "dir"]
    return tuple(entries + [e for p, e in sorted(out.items()) if e[0] != "dir"])


def _resolved(path: str, out: dict) -> str:
    """The real path of `path`; each symbolic link met on the way to it is added to `out`, so that
    `path` resolves in the copy as it does here (/lib -> usr/lib, libz.so.1 -> libz.so.1.2.13)."""
    for _ in range(40):  # the kernel's own bound on links followed
        parts, cur = path.strip("/").split("/"), ""
        for i, part in enumerate(parts):
            nxt = f"{cur}/{part}"
            if os.path.islink(nxt):
                target = os.readlink(nxt)
                out[nxt] = ("link", target, nxt)
                path = os.path.normpath(os.path.join(cur or "/", target, *parts[i + 1:]))
                break
            cur = nxt
        else:
            return cur or "/"
    raise OSError(f"too many symbolic links under {path}")


def _tree(top: str, out: dict, keep) -> None:
    """Every directory, regular file and symbolic link under `top` that `keep(name, is_dir, parent)` keeps."""
    out[top] = ("dir", top)
    with os.scandir(top) as it:
        for e in it:
            if e.is_symlink():
                out[e.path] = ("link", os.readlink(e.path), e.path)
            elif e.is_dir():
                if keep(e.name, True, top):
                    _tree(e.path, out, keep)
            elif e.is_file() and keep(e.name, False, top):
                out[e.path] = ("file", e.path)


def _libraries(modules: list[str]) -> list[str]:
    """The shared libraries `modules` load, as the dynamic loader finds them: `ldd` of the first names
    the loader, which then lists the libraries of all of them in one run (its trace mode, what ldd runs
    for each file, the others preloaded): ~40 ms, where `ldd` of each costs ~0.4 s of CPU. A path that
    LD_PRELOAD cannot carry (a space or colon in it) falls back to `ldd` of each."""
    if not modules:  # a Python built with every module in its binary
        return []
    ldd = shutil.which("ldd")
    if ldd is None:
        raise IsolationUnavailable("ldd is not installed: it lists the libraries the programs' Python needs")
    found, loader = _listed([ldd, modules[0]], dict(ENV))  # `loader`: the one path ldd names bare
    rest = modules[1:]
    if len(loader) == 1 and not any(c in m for m in rest for c in " \t:"):
        more, _ = _listed([*loader, modules[0]], dict(ENV, LD_TRACE_LOADED_OBJECTS="1", LD_PRELOAD=" ".join(rest)))
    else:
        more, _ = _listed([ldd, *rest], dict(ENV)) if rest else (set(), set())
    found |= more | loader
    if not found:
        raise IsolationUnavailable(f"ldd listed no library of Python's extension module {modules[0]}")
    return sorted(found)


def _listed(cmd: list[str], env: dict) -> tuple[set[str], set[str]]:
    """The libraries a loader trace (ldd's output) names with `=>`, and the paths it names bare (the
    loader itself, the preloaded files). Its exit status is not checked: one file it cannot read (a
    stray non-ELF .so) fails the status while the others' lists are still right, and a program
    importing that module fails as it would here."""
    found, bare = set(), set()
    for line in subprocess.run(cmd, capture_output=True, text=True, env=env).stdout.splitlines():
        words = line.split()
        if "=>" in words and len(words) > 2 and words[2].startswith("/"):
            found.add(words[2])
        elif words and words[0].startswith("/") and not words[0].endswith(":"):
            bare.add(words[0])
    return found, bare


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
