"""automon-bench as an inspect_ai task (needs pip install -e '.[inspect]'):

    inspect eval eval/inspect_task.py -T data_dir=data/builds/default -T subsets=syco_qa,sg_code \
        -T prompt=direct_v1 --model openai/gpt-4o-mini
    python eval/holdout.py backend=inspect_log backend.log=logs/<log>.eval   # its predictions, metrics, report

Task arguments, metrics and the round trip: docs/evaluation.md ("inspect_ai"); the task is
automon.inspect_task.task.automon_bench.
"""

from automon.inspect_task.task import automon_bench  # noqa: F401
