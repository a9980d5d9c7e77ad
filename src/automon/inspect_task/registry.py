"""inspect_ai's entry point (pyproject.toml [project.entry-points.inspect_ai]): importing it registers
the task as automon/automon_bench."""

from automon.inspect_task.task import automon_bench  # noqa: F401
