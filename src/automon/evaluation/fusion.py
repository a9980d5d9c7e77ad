"""fusion=: a fused monitor (automon.monitors.fused) around every monitor of the evaluation, fitted on
that monitor's in-distribution reference samples (automon.evaluation.inputs)."""

from __future__ import annotations

from typing import Mapping, Sequence

from automon.config.eval import HoldoutConfig
from automon.evaluation.inputs import Inputs
from automon.monitors import FusedMonitor, Monitor


def with_fusion(c: HoldoutConfig, monitors: Sequence[Monitor], inputs: Inputs) -> list[Monitor]:
    """The monitors, then (with fusion=) a fused monitor around each, in the same order."""
    if not c.fusion:
        return list(monitors)
    fused = [FusedMonitor.around(m, c, inputs.reference[m.in_distribution][0], inputs.calibration(m))
             for m in monitors]
    return [*monitors, *fused]


def print_cost(tm: Mapping[str, float]) -> None:
    """The detectors' time against the time the monitors took to score (goal: under 50% extra)."""
    det, score = tm.get("detectors_s", 0.0), tm.get("score_loop_s", 0.0)
    share = f"{det / score:.0%} of" if score > 0 else "n/a (every prediction came from the cache) vs"
    print(f"OOD detectors + fusion: {det:.1f} s = {share} the monitors' scoring time ({score:.1f} s)")
