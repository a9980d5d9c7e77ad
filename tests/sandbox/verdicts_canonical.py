"""Every HumanEval and MBPP task of the local sources, its canonical solution and a wrong twin (its first
mutation that parses), through both graders in each contained mode: the verdicts as JSON, so that a change
to the sandbox can be shown to change none of them (docs/security.md quotes the comparison).

    .venv/bin/python tests/sandbox/verdicts_canonical.py OUT.json [bwrap] [unshare]
    python -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); print(sum(a[k]!=b[k] for k in a), len(a))" A B
"""

from __future__ import annotations

import json
import os
import sys
import time

from automon.config.sg_code import SgCodeConfig
from automon.data.recipes.base import Drops
from automon.data.recipes.sg_code.mutation import apply_mutation, mutation_sites
from automon.data.recipes.sg_code.tasks import humaneval_task, mbpp_task
from automon.sandbox import Limits, Sandbox
from automon.sandbox.grading import hidden_job, hidden_verdict, visible_job, visible_verdict
from automon.sources.read import read_source

RAW = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "raw")


def tasks():
    cfg, drops, out = SgCodeConfig(), Drops(), []
    for name, parse in (("humaneval", humaneval_task), ("mbpp", mbpp_task)):
        for row in read_source(name, RAW):
            t = parse(dict(row.data, _ref=row.ref), cfg, drops)
            if t is not None:
                out.append(t)
    return out


def main(out: str, modes: list[str]) -> None:
    ts = tasks()
    jobs, keys = [], []
    for t in ts:
        wrong = next((c for m in mutation_sites(t.code, t.mutable_from) if (c := apply_mutation(t.code, m))), None)
        for which, code in (("canonical", t.code), ("wrong", wrong)):
            if code is None:
                continue
            asserts = [v.text for v in t.visible]
            jobs += [visible_job(code, asserts), hidden_job(code, t.hidden)]
            keys += [f"{t.key}/{which}/visible", f"{t.key}/{which}/hidden"]
    verdicts = {}
    for mode in modes:
        t0 = time.monotonic()
        with Sandbox(Limits(timeout_s=20, cpu_s=2, memory_mb=1024), workers=2, isolation=mode) as sb:
            results = sb.run_jobs(jobs)
        for k, r in zip(keys, results):
            ok, why = visible_verdict(r) if k.endswith("visible") else hidden_verdict(r)
            verdicts[f"{mode}/{k}"] = [ok, why]
        print(f"{mode}: {len(ts)} tasks, {len(jobs)} verdicts in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    with open(out, "w") as f:
        json.dump(verdicts, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["bwrap", "unshare"])
