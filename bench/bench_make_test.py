"""Benchmark `make test` as its goal is stated: a fresh clone of this repository's HEAD (with ../shared
beside it when this checkout has one), `make setup`, then make test's pytest command with every test's
duration. CPU from /proc/stat every 5 s: the suite is CPU-bound on 2 cores, so its CPU-seconds say more
than its wall time, which moves with the machine's hour.

Usage:
    python bench/bench_make_test.py              # fresh clone in a temp dir; record bench/results/make-test.json
    python bench/bench_make_test.py --in-place   # this checkout and its .venv as they are: pytest only, no setup
    python bench/bench_make_test.py --commit C   # a fresh clone of commit C (an earlier "before")

Prints setup, pytest and total wall time, the busy and idle CPU-seconds of the pytest run, the counts and
the longest files; appends the run to the --out record (machine, command, runs). pip's download cache is
whatever this machine has (a cold one adds the downloads to setup). A failed test is recorded, not hidden.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench_build import machine  # noqa: E402

PYTEST = ["-m", "pytest", "-n", "auto", "--dist", "loadfile", "--durations=0"]  # make test's, every duration
LOOP = "import time\nt = time.perf_counter()\nx = 0\nfor i in range(20_000_000):\n    x += i\nprint(time.perf_counter() - t)"
_DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+?)::")
_COUNT = re.compile(r"(\d+) (passed|skipped|failed|errors?)\b")


def parse_pytest_output(text: str) -> dict:
    """Counts, summed test durations and the ten longest files from a `pytest --durations=0` log."""
    by_file: collections.Counter = collections.Counter()
    for line in text.splitlines():
        m = _DURATION.match(line)
        if m:
            by_file[m.group(3)] += float(m.group(1))
    summary = next((line for line in reversed(text.splitlines()) if re.search(r"\d+ (passed|failed)", line)), "")
    counts = {"passed": 0, "skipped": 0, "failed": 0, "errors": 0}
    for n, kind in _COUNT.findall(summary):
        counts["errors" if kind.startswith("error") else kind] = int(n)
    return {**counts, "summed_test_durations_s": round(sum(by_file.values())),
            "largest_files_s": {f: round(s, 1) for f, s in by_file.most_common(10)}}


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, idle) jiffies of the whole machine since boot (/proc/stat's first line; idle includes iowait)."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(f) - f[3] - f[4], f[3] + f[4]


class CpuSampler:
    """The machine's busy and idle CPU-seconds between start and stop, read every `every_s` seconds (the
    samples stay in the record: where the cores idled shows there)."""

    def __init__(self, every_s: float = 5.0):
        self.every_s, self.samples, self._stop = every_s, [], threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(_cpu_jiffies())

    def __enter__(self) -> "CpuSampler":
        self.first = _cpu_jiffies()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.last = _cpu_jiffies()

    def totals(self) -> tuple[int, int]:
        return (round((self.last[0] - self.first[0]) / self._tick), round((self.last[1] - self.first[1]) / self._tick))

    def busy_percent(self) -> list[int]:
        """Busy share of each sampling interval, in percent."""
        points = [self.first, *self.samples, self.last]
        out = []
        for (b0, i0), (b1, i1) in zip(points, points[1:]):
            out.append(round(100 * (b1 - b0) / max(1, (b1 - b0) + (i1 - i0))))
        return out


def fail(why: str) -> None:
    print(f"error: {why}", file=sys.stderr)
    sys.exit(2)


def loop_s(python: str) -> float:
    return round(float(subprocess.run([python, "-c", LOOP], capture_output=True, text=True, check=True).stdout), 2)


def measure(repo: Path, fresh: bool, log: Path) -> dict:
    """One run in `repo` (a fresh clone: `make setup` first). The pytest log goes to `log`."""
    run: dict = {"started_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"), "fresh_clone": fresh}
    run["code_version"] = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=repo, capture_output=True,
                                         text=True, check=True).stdout.strip()
    setup_s = 0.0
    if fresh:
        t0 = time.perf_counter()
        r = subprocess.run(["make", "setup"], cwd=repo, capture_output=True, text=True)
        setup_s = time.perf_counter() - t0
        if r.returncode != 0:
            fail(f"make setup failed (exit {r.returncode}); its output ends:\n{(r.stdout + r.stderr)[-3000:]}")
        print(f"setup {setup_s:.0f} s", flush=True)
    python = str(repo / ".venv" / "bin" / "python")
    before = loop_s(python)
    with CpuSampler() as cpu, log.open("w") as out:
        t0 = time.perf_counter()
        rc = subprocess.run([python, *PYTEST], cwd=repo, stdout=out, stderr=subprocess.STDOUT).returncode
        wall = time.perf_counter() - t0
    busy, idle = cpu.totals()
    run.update(setup_s=round(setup_s), pytest_wall_s=round(wall), total_s=round(setup_s + wall), pytest_exit=rc,
               busy_cpu_s=busy, idle_cpu_s=idle, busy_percent_every_5s=cpu.busy_percent(),
               loop_s_before_after=[before, loop_s(python)], **parse_pytest_output(log.read_text(errors="replace")))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in-place", action="store_true", help="this checkout and its .venv: pytest only, no setup")
    ap.add_argument("--commit", default="HEAD", help="the commit a fresh clone checks out")
    ap.add_argument("--dir", help="the directory the fresh clone goes under (default: a new temp dir, removed after)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "make-test.json"))
    ap.add_argument("--log", default=str(Path(tempfile.gettempdir()) / "make-test.log"), help="the pytest log")
    args = ap.parse_args()
    out = Path(args.out)
    log = Path(args.log)
    if args.in_place:
        if args.commit != "HEAD":
            fail("--commit needs a fresh clone: leave out --in-place")
        run = measure(REPO, False, log)
    else:
        with tempfile.TemporaryDirectory(prefix="make-test-", dir=args.dir) as tmp:
            clone = Path(tmp) / REPO.name
            subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
            r = subprocess.run(["git", "checkout", "-q", args.commit], cwd=clone, capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"--commit {args.commit}: {r.stderr.strip().removeprefix('error: ')}")
            if (REPO.parent / "shared").is_dir():
                (Path(tmp) / "shared").symlink_to(REPO.parent / "shared")
            run = measure(clone, True, log)
    print(f"{run['code_version']}: setup {run['setup_s']} s + pytest {run['pytest_wall_s']} s = {run['total_s']} s; "
          f"busy {run['busy_cpu_s']} CPU-s, idle {run['idle_cpu_s']}; {run['passed']} passed, {run['skipped']} skipped, "
          f"{run['failed']} failed, {run['errors']} errors")
    for f, s in run["largest_files_s"].items():
        print(f"  {s:7.1f} s  {f}")
    rec = json.loads(out.read_text()) if out.exists() else {
        "what": "make test as its goal is stated: a fresh clone, `make setup`, then make test's pytest command "
                "with --durations=0 (or --in-place: pytest only); CPU from /proc/stat every 5 s",
        "machine": machine(), "command": " ".join(["python", *PYTEST]), "loop": LOOP, "runs": []}
    rec["runs"].append(run)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {out} (pytest log: {log})")


if __name__ == "__main__":
    main()
