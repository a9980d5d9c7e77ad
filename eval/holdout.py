"""Score monitors on the held-out test set: MR/FAR with CIs, the transfer matrix, plots, report.

Usage:
    python eval/holdout.py adapter=runs/<run>/adapter             # vLLM on GPU, all test subsets
    python eval/holdout.py adapter=null model=qwen3_4b_instruct_2507 prompt=evidence_v1 shots=3
    python eval/holdout.py sweep_dir=runs/sweep1                   # every adapter in it + the base model -> matrix
    python eval/holdout.py backend=openai model=api backend.model_name=gpt-4o-mini   # any OpenAI-compatible server
    python eval/holdout.py adapter=runs/x/adapter model=tiny backend=hf data.dir=data/builds/default output_dir=evals/x  # CPU
    python eval/holdout.py backend=inspect_log backend.log=logs/<log>.eval   # an inspect eval of eval/inspect_task.py

Outputs and settings: docs/evaluation.md.
"""

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)
from automon.config.eval import register
from automon.errors import entry
from automon.evaluation import USER_ERRORS, run

register()


@entry(config_path="../conf", config_name="holdout", also=USER_ERRORS)
def main(cfg) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
