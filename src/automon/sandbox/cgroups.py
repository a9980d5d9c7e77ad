"""A pids cgroup per sandbox worker, where the caller may create one (root, typically).

RLIMIT_NPROC bounds a program's tasks only when its user is not the host's root: the kernel
exempts root, and a sandbox started by root runs as a uid mapped to root. Where the caller can
create a pids cgroup (cgroup v1's pids hierarchy, or v2 with the pids controller enabled for the
caller's cgroup), each worker's zygote moves itself into one at start-up (through a descriptor of
the group's cgroup.procs opened here and passed in: the kernel checks the opener's credentials,
and the zygote closes it before any program runs), and pids.max bounds the zygote plus the program
tree strictly. Elsewhere the zygote's polled count of the tree's tasks is the bound.
"""

from __future__ import annotations

import os

_V1_ROOT = "/sys/fs/cgroup/pids"
_V2_ROOT = "/sys/fs/cgroup"


def _own_v2_dir() -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
    except OSError:
        return None
    if rel is None:
        return None
    path = os.path.join(_V2_ROOT, rel.lstrip("/"))
    try:
        with open(os.path.join(path, "cgroup.subtree_control")) as f:
            return path if "pids" in f.read().split() else None
    except OSError:
        return None


def _parent_dir() -> str | None:
    """Where to create groups: the v1 pids hierarchy's root, or the caller's own v2 cgroup if it
    delegates the pids controller; None if neither is writable."""
    for path in (_V1_ROOT if os.path.isfile(os.path.join(_V1_ROOT, "cgroup.procs")) else None, _own_v2_dir()):
        if path and os.access(path, os.W_OK | os.X_OK):
            return path
    return None


class PidsGroup:
    """One worker's pids cgroup: created empty, its pids.max set per batch, removed at close."""

    def __init__(self, path: str):
        self.path = path
        self.max: int | None = None

    @classmethod
    def create(cls, name: str) -> "PidsGroup | None":
        parent = _parent_dir()
        if parent is None:
            return None
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except OSError:
            return None
        return cls(path)

    def procs_fd(self) -> int:
        """A write descriptor of cgroup.procs, to pass to the worker (inheritable)."""
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        os.set_inheritable(fd, True)
        return fd

    def set_max(self, tasks: int) -> None:
        if tasks != self.max:
            with open(os.path.join(self.path, "pids.max"), "w") as f:
                f.write(str(tasks))
            self.max = tasks

    def remove(self) -> None:
        try:
            os.rmdir(self.path)
        except OSError:
            pass
