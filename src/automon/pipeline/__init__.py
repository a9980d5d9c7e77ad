"""The one-command pipeline: build -> train every subset -> held-out matrix -> report (pipeline.py)."""

from automon.pipeline.run import run
from automon.pipeline.stages import PipelineError

__all__ = ["run", "PipelineError"]
