"""automon-bench as an inspect_ai task (needs pip install -e '.[inspect]'):

    inspect eval eval/inspect_task.py -T data_dir=data/builds/default -T subsets=syco_qa,sg_code \
        -T prompt=direct_v1 --model openai/gpt-4o-mini
    python eval/holdout.py backend=inspect_log backend.log=logs/<log>.eval   # its predictions, metrics, report

Task arguments, metrics and the round trip: docs/evaluation.md ("inspect_ai"). The task is
automon.inspect_task.task.automon_bench (also registered as automon/automon_bench); `inspect eval <file>`
finds the tasks a file decorates itself, hence this one-line task.
"""

import functools

from inspect_ai import Task, task

from automon.inspect_task.task import automon_bench as _automon_bench


@task
@functools.wraps(_automon_bench, assigned=("__doc__",), updated=())  # its signature (__wrapped__) and docstring
def automon_bench(*args, **kwargs) -> Task:
    return _automon_bench(*args, **kwargs)
