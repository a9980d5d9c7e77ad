"""What the zygote watches: a program's process (captured, truncated stdio; how it ended, as
RunResult's fields) and its whole tree (CPU time, memory and tasks read from /proc; what it left
on disk, removed). Standard library only; imported by worker.py as a top-level module."""

from __future__ import annotations

import io
import os
import select
import signal
import sys
import time
import traceback

try:
    from automon.sandbox.limits import Limits
except ImportError:  # run inside the sandbox, beside limits.py
    from limits import Limits

class Capture:
    """Collects one stream, keeping its first and last `limit // 2` bytes (the tail holds the
    traceback and whatever a grader prints last)."""

    def __init__(self, limit: int):
        self.half, self.head, self.tail, self.total = max(1, limit // 2), b"", b"", 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data)[-self.half:]

    def text(self) -> str:
        gap = b"\n...[truncated]...\n" if self.total > len(self.head) + len(self.tail) else b""
        return (self.head + gap + self.tail).decode("utf-8", "replace")


def _stdio(out_w: int, err_w: int, keep: tuple[int, ...] = ()) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    lo = 3
    for fd in sorted(keep):  # every inherited fd closed but those kept
        os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 1 << 16)
    # Fresh stdio objects on fds 0-2, configured as `python` configures them for pipes.
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                                   encoding="utf-8")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                                   encoding="utf-8", errors="backslashreplace",
                                                   line_buffering=True)


class Proc:
    """A process being watched: its pid, its output, how it ended."""

    def __init__(self, pid: int, out_r: int, err_r: int, limits: Limits):
        self.pid = pid
        self.caps = {out_r: Capture(limits.output_bytes), err_r: Capture(limits.output_bytes)}
        self.open = {out_r, err_r}
        self.reaped = None          # (status, rusage)
        self.killed_for = None      # "cpu" / "memory" when its tree was ended over a limit
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # Linux < 5.3 (e.g. RHEL 8): wait4 is polled instead
            self.pidfd = None

    def feed(self, fd: int) -> None:
        data = os.read(fd, 65536)
        if data:
            self.caps[fd].add(data)
        else:
            self.open.discard(fd)

    def poll(self) -> None:
        if self.reaped is None:
            wpid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if wpid:
                self.reaped = (status, usage)

    def fds(self) -> list[int]:
        return list(self.open) + ([self.pidfd] if self.pidfd is not None and self.reaped is None else [])

    def step(self, ready: list[int]) -> None:
        self.poll()
        for fd in [fd for fd in ready if fd in self.open]:
            self.feed(fd)

    def done(self) -> bool:
        return self.reaped is not None and not self.open

    def finish(self) -> None:
        """After it was killed: reap it, read what it wrote before."""
        if self.reaped is None:
            _, status, usage = os.wait4(self.pid, 0)
            self.reaped = (status, usage)
        for fd in list(self.open):
            while fd in self.open and select.select([fd], [], [], 0)[0]:
                self.feed(fd)
            self.open.discard(fd)

    def close(self) -> None:
        for fd in self.caps:
            os.close(fd)
        if self.pidfd is not None:
            os.close(self.pidfd)

    def result(self, t0: float, timed_out: bool) -> list:
        status, usage = self.reaped
        out, err = (c.text() for c in self.caps.values())
        times = [round(time.monotonic() - t0, 4), round(usage.ru_utime + usage.ru_stime, 4)]
        if self.killed_for in ("memory", "processes"):
            err += f"\n[sandbox: the program's processes together went over the {self.killed_for} limit]\n"
        if timed_out:
            return ["timeout", None, None, out, err, *times]
        if self.killed_for == "cpu":
            return ["signaled", None, int(signal.SIGXCPU), out, err, *times]
        if os.WIFSIGNALED(status):
            return ["signaled", None, os.WTERMSIG(status), out, err, *times]
        return ["exited", os.WEXITSTATUS(status), None, out, err, *times]


def spawn(target, limits: Limits, keep: tuple[int, ...]) -> Proc:
    """Fork `target` (a function returning an exit status) in a process group of its own, with
    captured stdio, keeping the fds in `keep` and closing every other."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            _stdio(out_w, err_w, keep)
            code = target()
        except BaseException:  # the confinement itself failed: report it, never run unconfined
            try:
                traceback.print_exc()
                sys.stderr.flush()
            except BaseException:
                pass
            code = 1
        finally:
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    return Proc(pid, out_r, err_r, limits)


def remove_tree(path: str) -> None:
    """Remove a directory a program left behind, without recursion (it may nest deeper than
    Python's recursion limit) and by descriptor (deeper than PATH_MAX)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    names: list[str] = []
    try:
        while True:
            sub = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        sub = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if sub is not None:
                fd, old = os.open(sub, flags, dir_fd=fd), fd
                os.close(old)
                names.append(sub)
            elif names:
                fd, old = os.open("..", flags, dir_fd=fd), fd
                os.close(old)
                os.rmdir(names.pop(), dir_fd=fd)
            else:
                break
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _read(dir_fd: int, path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def namespace_members(proc_fd: int) -> list[str]:
    """The running program's processes (pids in proc_fd's /proc): every process in the zygote's PID
    namespace or one nested in it, but the zygote. `proc_fd` is the worker's /proc, one level up:
    NSpid lists a process's pid there, then in the zygote's namespace (where the zygote is 1), then
    in the program's (where the program is 1)."""
    out = []
    for name in os.listdir(proc_fd):
        if not name.isdigit():
            continue
        try:
            status = _read(proc_fd, f"{name}/status")
        except OSError:
            continue
        ns_pids = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith(b"NSpid:")), [])
        if len(ns_pids) >= 2 and ns_pids[1] != b"1":
            out.append(name)
    return out


def descendants(proc_fd: int, root: int) -> list[int]:
    """Every live descendant of process `root` (isolation none: the zygote is a child subreaper,
    so a program's orphans stay its descendants; a zombie has none left)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir(proc_fd):
        if name.isdigit():
            try:
                state, ppid = _read(proc_fd, f"{name}/stat").rsplit(b")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue
            if state != b"Z":
                children.setdefault(int(ppid), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def tree_usage(proc_fd: int, members) -> tuple[float, int, int]:
    """CPU seconds (live processes and the children they reaped; a zombie's own), memory
    (proportional set size: a page shared by n processes counts 1/n in each, so forked children
    are not charged for their parent's pages; the resident size where that is not readable) and
    tasks of the processes `members`."""
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    cpu, mem, tasks = 0, 0, 0
    for pid in members:
        try:
            fields = _read(proc_fd, f"{pid}/stat").rsplit(b")", 1)[1].split()
            cpu += sum(int(x) for x in fields[11:15])
            tasks += int(fields[17])
            try:
                rollup = _read(proc_fd, f"{pid}/smaps_rollup")
                mem += next(int(ln.split()[1]) * 1024 for ln in rollup.splitlines() if ln.startswith(b"Pss:"))
            except (OSError, StopIteration):
                mem += int(fields[21]) * page
        except (OSError, IndexError, ValueError):
            continue
    return cpu / tick, mem, tasks
