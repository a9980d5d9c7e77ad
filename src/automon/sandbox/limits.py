"""Isolation mode names and `Limits`, shared by the parent and the worker.

Standard library only, no automon imports: the worker (worker.py, run as a plain script inside the
sandbox) imports this file as a top-level module, the parent as automon.sandbox.limits."""

from __future__ import annotations

import math
from dataclasses import dataclass

ISOLATION_BWRAP = "bwrap"        # bubblewrap: its own minimal root, all namespaces unshared
ISOLATION_UNSHARE = "unshare"    # util-linux unshare: the same namespaces; the worker builds the minimal root
ISOLATION_NONE = "none"          # no isolation at all: only when the user asks for it explicitly

# The largest value of each limit, and whether it must be a whole number. A day of wall or CPU
# time is already far past any use; without a bound `inf` or 1e10 reach timers and select() as
# values they cannot hold.
_BOUNDS = {"timeout_s": (86400, False), "memory_mb": (1 << 20, True), "output_bytes": (1 << 26, True),
           "cpu_s": (86400, False), "processes": (4096, True)}


@dataclass(frozen=True)
class Limits:
    """Per-program limits.

    The CPU-time limit defaults to timeout_s. A CPU limit tighter than the wall limit gives
    load-independent verdicts for busy programs: CPU time does not grow when other processes
    compete for the cores, wall time does. A program over its CPU time is killed by SIGPROF; a
    process tree over it in total (a program that forks) by SIGXCPU. memory_mb bounds each
    process's address space and the whole tree's memory: its resident memory (plus, contained, the
    files in its /tmp); processes bounds the tasks (processes and threads) of the tree.
    """
    timeout_s: float = 5.0        # wall clock
    memory_mb: int = 512          # RLIMIT_AS of each process; the tree's resident total plus its /tmp
    output_bytes: int = 8192      # kept per stream (first half and last half)
    cpu_s: float | None = None
    processes: int = 8            # tasks in the program's tree, itself included

    def __post_init__(self):
        for name, (most, whole) in _BOUNDS.items():
            value = getattr(self, name)
            if value is None and name == "cpu_s":
                continue
            number = type(value) is int or (type(value) is float and not whole)
            if not (number and math.isfinite(value) and 0 < value <= most):
                raise ValueError(f"sandbox limit {name} must be a positive {'whole ' if whole else ''}number, "
                                 f"at most {most}; got {value!r}")

    @property
    def cpu_limit(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.timeout_s
