"""automon-bench as an inspect_ai task (task.py), with automon's verdicts and metrics as its scorer
(scorer.py). inspect-ai is an optional dependency (pip install -e '.[inspect]'): nothing else in automon
imports this package, and eval/holdout.py reads the task's logs through backend=inspect_log
(automon.backends.inspect_log), which imports inspect_ai only when it reads one.

    inspect eval eval/inspect_task.py -T data_dir=data/builds/default --model <provider/model>
    inspect eval automon/automon_bench ...     # the same task, registered by the inspect_ai entry point
"""
