"""backend=inspect_log: what it refuses at start-up (no log, another task's log, a log of other prompts or
settings than the evaluation asks), one line each; the round trip itself is tests/inspect_task/test_task.py."""

from __future__ import annotations

import pytest

pytest.importorskip("inspect_ai")

import support  # noqa: E402
from inspect_ai import Task  # noqa: E402
from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.scorer import match  # noqa: E402

from automon.errors import ConfigError  # noqa: E402
from automon.inspect_task.task import automon_bench  # noqa: E402


def _yes(input, tools, tool_choice, config) -> ModelOutput:
    out = ModelOutput.from_content("mockllm/model", "yes")
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # else inspect counts with tiktoken (online)
    return out


def _log(tmp_path, task) -> str:
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=_yes), log_dir=str(tmp_path / "logs"),
                         display="none")
    return log.location


def test_a_log_of_other_prompts_or_settings_is_refused_with_the_keys_to_set(small_build, tmp_path):
    log = _log(tmp_path, automon_bench(data_dir=str(small_build), subsets="syco_qa", prompt="evidence_v1",
                                       threshold=0.7))
    base = ["backend=inspect_log", f"backend.log={log}", f"data.dir={small_build}", "wandb.mode=disabled"]
    with pytest.raises(ConfigError, match=r"set prompt\.name=evidence_v1 data\.subsets=\[syco_qa\] threshold=0\.7"):
        support.compose(base)
    c = support.compose([*base, "prompt=evidence_v1", "data.subsets=[syco_qa]", "threshold=0.7"])
    assert c.backend.model_label(c.model) == "inspect-mockllm/model"
    assert c.backend.source_identity()["model"] == "mockllm/model"
    with pytest.raises(ConfigError, match="leave stress= and far_reference= out"):
        support.compose([*base, "prompt=evidence_v1", "data.subsets=[syco_qa]", "threshold=0.7", "far_reference=true"])


def test_no_log_or_another_tasks_log_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"needs backend\.log="):
        support.compose(["backend=inspect_log"])
    with pytest.raises(ConfigError, match="no such file"):
        support.compose(["backend=inspect_log", f"backend.log={tmp_path / 'none.eval'}"])
    other = _log(tmp_path, Task(dataset=[Sample(input="Say yes.", target="yes")], scorer=match()))
    with pytest.raises(ConfigError, match="not of automon's task"):
        support.compose(["backend=inspect_log", f"backend.log={other}"])
