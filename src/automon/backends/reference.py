"""backend=reference: the reference monitors (automon.data.reference), rules with no model, scored by
the same evaluation as LLM judges so that any report can show them as rows beside a monitor.

`python eval/holdout.py backend=reference data.dir=<build>` scores one monitor per rule
(`backend.rules`): `agrees`, `rewarded`, `test_literal` and `incorrect` each check one feature of a
misbehavior, `construct` the conjunction. On a build with contrast controls (wordings v9) the
single-feature rules flag their own control kind; on the paired core alone they read the label, which
is what a monitor's MR/FAR must be compared against. A rule flags nothing (P = 0) on a sample its
feature is not defined for (another subset, a source without a structured answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, List, Optional

from automon.backends.base import BackendConfig
from automon.controls import REFERENCE_RULES, REFERENCE_VERSION
from automon.errors import ConfigError
from automon.models.loading import API_MODEL


@dataclass
class ReferenceConfig(BackendConfig):
    name: str = "reference"
    rules: List[str] = field(default_factory=lambda: list(REFERENCE_RULES))  # automon.data.reference.RULES
    max_seq_length: Optional[int] = None  # a rule reads the sample, not a prompt

    local_model: ClassVar[bool] = False
    local_weights: ClassVar[bool] = False
    defines_monitors: ClassVar[Optional[str]] = "reference"  # one monitor per rule

    def __post_init__(self) -> None:
        super().__post_init__()
        valid = list(REFERENCE_RULES)
        bad = [r for r in self.rules if r not in valid]
        if bad or not self.rules:
            raise ConfigError(f"backend.rules={list(self.rules)}: each must be one of {', '.join(valid)}")

    def check_model(self, model: Any) -> None:
        """Rules need no model: model= only names the report, never the API placeholder."""
        if model.name == API_MODEL:
            raise ConfigError(f"model={API_MODEL} is the placeholder for backend=openai; backend=reference needs no "
                              "model (leave model= at its default)")

    def model_label(self, model: Any) -> str:
        return "reference"

    def cache_identity(self, model: Any, prompt_kind: str, adapter: str | None) -> dict[str, Any]:
        return {"reference": REFERENCE_VERSION, **self.generation_identity(prompt_kind)}
