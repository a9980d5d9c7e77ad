"""Monitors: `Monitor.score(items) -> list[Prediction]` (base.py), one module per kind.

- judge.py  `JudgeMonitor`: the base model, a LoRA adapter on it, a model behind an API; scored by a
            scoring backend (automon.backends: vllm, hf, openai)
- probe.py  `ProbeMonitor`: a classifier on frozen features of the sample (automon.probes), trained by
            train/probe.py
- reference.py `ReferenceMonitor`: a rule that checks one feature of a misbehavior, or the conjunction
            (automon.data.reference), no model; backend=reference
- fused.py  `FusedMonitor`: a wrapper fusing another monitor's score with OOD detectors (automon.ood)

A backend whose config defines its own monitors instead of the base model and adapters
(`BackendConfig.defines_monitors`) names an entry of DEFINED_BY_BACKEND: backend=probe -> one probe
per training subset. Adding a kind of monitor: docs/evaluation.md, "Where new things go".
"""

from typing import Any, Callable

from automon.monitors.base import BASE, Monitor, Prediction, Rendered, Resources, messages_sha  # noqa: F401
from automon.monitors.fused import FusedMonitor  # noqa: F401
from automon.monitors.judge import JudgeMonitor  # noqa: F401
from automon.monitors.probe import ProbeMonitor, probe_monitors  # noqa: F401
from automon.monitors.reference import ReferenceMonitor, reference_monitors  # noqa: F401

# BackendConfig.defines_monitors -> the monitors that backend's config defines: f(evaluation config,
# manifest_hash(build dir) -> the manifest sha256 of a build, which identifies what they are trained on).
DEFINED_BY_BACKEND: dict[str, Callable[[Any, Callable[[str], str]], list[Monitor]]] = {
    "probe": probe_monitors, "reference": reference_monitors}
