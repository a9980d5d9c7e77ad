"""What the hostile programs of test_hostile.py get, measured, per isolation mode (the figures
docs/security.md quotes): kernel memory held in socket and pipe buffers, bytes written to any
writable place, and how long a colliding reply and a signal-deaf test hold the grader; then the
time a plain and a graded job take through a pool of 2 workers (--timing: that only); or the negative
dentries 1,000,000 lookups of missing names leave on the machine (--dentries: that only).

    .venv/bin/python tests/sandbox/measure_hostile.py [--timing | --dentries] [bwrap] [unshare]
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_hostile as h  # noqa: E402  (the hostile programs themselves)

from automon.sandbox import Limits, Sandbox  # noqa: E402
from automon.sandbox.grading import hidden_job, hidden_tests, hidden_verdict  # noqa: E402


def hostile(mode: str) -> str:
    tight = Limits(timeout_s=20, cpu_s=10, memory_mb=128)
    with Sandbox(tight, workers=1, isolation=mode) as sb:
        kernel = sb.run(h.KERNEL_HOARD)
        files = sb.run(h.FILE_HOARD)
        written = max([int(ln.split()[-1]) for ln in files.stdout.splitlines()] or [0])
        t0 = time.monotonic()
        g = sb.run_jobs([hidden_job(h.COLLIDING_REPLY, h.HIDDEN)], Limits(timeout_s=2, cpu_s=1, memory_mb=256))[0]
        colliding = time.monotonic() - t0
        t0 = time.monotonic()
        deaf = sb.run_jobs([hidden_job(h.CORRECT, h.DEAF_GRADER)], Limits(timeout_s=0.5, memory_mb=256))[0]
        deaf_s = time.monotonic() - t0
    return (f"{mode}: kernel buffers held {kernel.stdout.strip() or '-'} MB (memory_mb=128); "
            f"written {written} MB (memory_mb=128{', ended: over the memory limit' if 'memory limit' in files.stderr else ''}); "
            f"colliding reply {colliding:.1f} s (deadline 3 s, verdict {hidden_verdict(g)}); "
            f"deaf grader {deaf_s:.1f} s (deadline 1.5 s, {deaf.grader.status})")


def timing(mode: str, n: int = 300) -> str:
    """Jobs through a pool of 2 workers, as the build runs them: plain, then graded."""
    same = hidden_tests("assert f(1) == 1\nassert f(2) == 2\n", remote=("f",))
    with Sandbox(Limits(timeout_s=5), workers=2, isolation=mode) as sb:
        sb.run_many(["print(1)"] * 20)
        t0 = time.perf_counter()
        sb.run_many(["print(1)"] * n)
        plain = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        sb.run_jobs([hidden_job("def f(x):\n    return x\n", same)] * n)
        graded = (time.perf_counter() - t0) / n
    return f"{mode}: {plain * 1000:.1f} ms a plain job, {graded * 1000:.1f} ms a graded job (2 workers, {n} jobs)"


def dentries(mode: str, n: int = 1_000_000) -> str:
    """test_hostile's lookups of missing names, n of them: the host's negative dentries (nr_negative
    of /proc/sys/fs/dentry-state) after the program ran and after its pool closed, against before
    the pool started. Other processes of the machine move the count too."""
    before = h._negative_dentries()
    with Sandbox(Limits(timeout_s=600, cpu_s=60, memory_mb=256), workers=1, isolation=mode) as sb:
        r = sb.run(h.NEGATIVE_LOOKUPS.format(n=n))
        running = h._negative_dentries() - before
    closed = h._negative_dentries() - before
    return (f"{mode}: {r.stdout.strip() or r.stderr[-200:]} of {n:,} lookups missing; negative dentries "
            f"{running:+,} after the program, {closed:+,} after the pool closed ({r.cpu_s:.1f} s CPU)")


if __name__ == "__main__":
    args = sys.argv[1:]
    what = {"--timing": timing, "--dentries": dentries}
    only = [what[a] for a in args if a in what]
    for mode in [a for a in args if a not in what] or ["bwrap", "unshare"]:
        print(only[0](mode) if only else f"{hostile(mode)}\n{timing(mode)}", flush=True)
