"""Publish an evaluation's results: the whole output set staged and moved in (automon.evaluation.publish),
unless the results already there failed on fewer requests; an incomplete evaluation is an error
after its report is written."""

from __future__ import annotations

import json
import logging
import time
from typing import Mapping, MutableMapping, Sequence

from omegaconf import OmegaConf

from automon.config.eval import HoldoutConfig
from automon.evaluation.completeness import (earlier_failures, incomplete_fix, request_summary, requests_complete,
                                             worst)
from automon.evaluation.errors import IncompleteEvaluation
from automon.evaluation.identity import identity, record
from automon.evaluation.inputs import Inputs
from automon.evaluation.outputs import write_outputs
from automon.evaluation.publish import staged_outputs
from automon.monitors import Monitor
from automon.prompts import get_template
from automon.release import release_line

log = logging.getLogger("automon.evaluation")


def publish_results(c: HoldoutConfig, monitors: Sequence[Monitor], inputs: Inputs, rows: Mapping[str, list],
                    docs: Mapping[str, dict], tm: MutableMapping[str, float], t_start: float) -> None:
    t0 = time.perf_counter()
    out_dir = inputs.out_dir
    summary = request_summary([r for rs in rows.values() for r in rs], c.max_failed_share)
    # Per monitor: one adapter the server does not know fails all its requests, however many others a
    # sweep has.
    summary["complete"] = all(requests_complete(d) for d in docs.values())
    earlier = earlier_failures(out_dir, inputs.build.manifest_hash, len(inputs.test), c)
    kept = earlier is not None and earlier < summary["failed"]
    if kept:
        log.warning("kept the earlier results in %s (%d failed requests) over this run's (%d failed)",
                    out_dir, earlier, summary["failed"])
        tm["report_s"] += time.perf_counter() - t0
        _finish_timing(tm, t_start)
        (out_dir / "timing.json").write_text(json.dumps(dict(tm), indent=2) + "\n")
    else:  # the whole set in a staging dir, then moved in: a failure leaves the earlier set whole
        with staged_outputs(out_dir) as stage:
            (stage / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(c)), encoding="utf-8")
            written = write_outputs(c, out_dir, monitors, rows, docs, get_template(c.prompt.name).kind, write_to=stage,
                                    stressed_samples=[it.sample for it in inputs.stressed_items()])
            tm["report_s"] += time.perf_counter() - t0
            _finish_timing(tm, t_start)
            (stage / "timing.json").write_text(json.dumps(dict(tm), indent=2) + "\n")
            if summary["complete"]:  # only complete outputs are current (pipeline.py skips them)
                record(stage, identity(c, monitors, inputs.build.manifest_hash), written,
                       release_line(inputs.build.manifest, inputs.build.manifest_hash))
    if not summary["complete"]:
        where = (f"{out_dir}: the earlier results there, with fewer failures, were kept" if kept
                 else f"{out_dir}/report.md, marked incomplete")
        raise IncompleteEvaluation(
            f"{summary['failed']} of {summary['n']} requests to backend={c.backend.name} failed; {worst(dict(docs))} "
            f"is over max_failed_share={c.max_failed_share} (first error: {summary['first_error']})",
            where,
            incomplete_fix(summary["first_error"]))


def _finish_timing(tm: MutableMapping[str, float], t_start: float) -> None:
    tm["total_s"] = time.perf_counter() - t_start
    tm["harness_s"] = tm["total_s"] - tm.get("model_s", 0.0) - tm.get("load_s", 0.0)
