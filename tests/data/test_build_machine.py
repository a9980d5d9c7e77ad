"""One build on every machine: a small build of the default wordings, made under every isolation mode
this machine runs (bwrap, unshare, none), with 1 and 2 workers, two PYTHONHASHSEEDs, two time zones,
two LANGs, from two copies of the sources, writes the same test.jsonl, train.jsonl and manifest.json
(whose sha256 is the data hash adapters record). How each machine made it is in build_log.json.

Not the cartesian product: four builds, each factor varied across them so that every value of every
factor is used at least once (an unavailable mode gives its build to the next mode this machine has).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

from support import REPO, build_cfg
from automon.data.io import rebuild_hint
from automon.data.status import status
from automon.sandbox import Sandbox, SandboxError
from automon.sandbox.isolation import MODES
from automon.sources.synthetic import write_synthetic_root

BUILD = REPO / "data_build" / "build.py"
# Small, with sg_code (the subset whose code runs in the sandbox) and a subset of each other kind of
# recipe that a hash seed, time zone or locale could reach (cue wording, incentive choice).
CONFIG = ["subsets=[syco_qa,sg_qa,sg_code]", "test.syco_qa=4", "test.sg_qa=4", "test.sg_code=4"]
# Per build: workers, PYTHONHASHSEED, TZ, LANG (the isolation mode is assigned below).
FACTORS = [(1, "0", "UTC", "C.UTF-8"), (2, "4242", "Pacific/Kiritimati", "C"),
           (2, "0", "America/St_Johns", "C.UTF-8"), (1, "4242", "UTC", "C")]


def _runs_here(mode: str) -> bool:
    try:
        with Sandbox(workers=1, isolation=mode) as sb:
            return sb.isolation == mode
    except SandboxError:
        return False


def _build(root, out, mode: str, workers: int, hashseed: str, tz: str, lang: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_")}
    env.update(PYTHONHASHSEED=hashseed, TZ=tz, LANG=lang)
    r = subprocess.run([sys.executable, str(BUILD), f"sources.root={root}", f"out={out}", *CONFIG,
                        f"sandbox.isolation={mode}", f"sg_code.workers={workers}", f"disjoint.workers={workers}"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_same_build_on_every_machine(tmp_path):
    modes = [m for m in MODES if _runs_here(m)]
    assert "none" in modes  # always runs: the other two are skipped where this machine lacks them
    roots = [write_synthetic_root(tmp_path / "raw", n=40)]
    roots.append(shutil.copytree(roots[0], tmp_path / "elsewhere" / "raw"))  # another path, the same files
    builds = []
    for i, factors in enumerate(FACTORS):
        mode = modes[i % len(modes)]
        out = tmp_path / f"b{i}-{mode}"
        _build(roots[i % 2], out, mode, *factors)
        builds.append((out, mode, factors))
    first = builds[0][0]
    for out, mode, factors in builds[1:]:
        for name in ("test.jsonl", "train.jsonl", "manifest.json"):
            assert (out / name).read_bytes() == (first / name).read_bytes(), (name, mode, factors)
    logs = {}
    for out, mode, factors in builds:
        record = json.loads((out / "build_log.json").read_text())["build"]
        assert record["sandbox_isolation"] == {"sg_code": mode}, record
        assert record["config"]["sandbox"] == {"isolation": mode}
        assert record["config"]["sg_code"] == record["config"]["disjoint"] == {"workers": factors[0]}
        assert "root" not in json.loads((out / "manifest.json").read_text())["config"].get("sources", {})
        logs[mode] = record
    sg = [json.loads(line) for line in (first / "test.jsonl").open() if '"subset": "sg_code"' in line]
    assert sg and all("isolation" not in s["meta"]["verification"] for s in sg)  # the machine's, not the sample's
    manifest = (first / "manifest.json").read_text()
    assert str(tmp_path) not in manifest and "workers" not in manifest and "isolation" not in manifest
    print("modes", sorted(logs), "data hash", hashlib.sha256((first / "manifest.json").read_bytes()).hexdigest())
    # The build is current for another machine's keys (sources elsewhere, other workers and mode), not
    # for another seed; a damaged file's message still says how it was made (from the build record).
    machine = [f"sandbox.isolation={modes[-1]}", "sg_code.workers=3", "disjoint.workers=3"]
    assert status(build_cfg([f"sources.root={roots[1]}", f"out={first}", *CONFIG, *machine])).current
    assert not status(build_cfg([f"sources.root={roots[0]}", f"out={first}", *CONFIG, "seed=1"])).current
    assert f"synthetic ones at {roots[0]}" in rebuild_hint(json.loads(manifest), first)


def test_the_recipe_reports_the_mode_it_ran_under_and_no_sample_records_it():
    """The mode sg_code's code ran under is the build record's (build_log.json), not the samples': the
    recipe reports it, and no sample's verification holds it, so a build is the same across modes."""
    from automon.config.sg_code import SgCodeConfig
    from test_sg_code import HUMANEVALS, MBPPS, build

    ran: list[str] = []
    items, _ = build(SgCodeConfig(workers=1), humaneval=HUMANEVALS, mbpp=MBPPS, extras=True, ran_under=ran.append)
    checks = [c for it in items for d in it.train
              for c in (d.meta.get("verification"), d.meta.get("high_reward_option")) if c is not None]
    assert len(ran) == 1 and ran[0] in MODES and checks
    assert all("isolation" not in c for c in checks), checks
