"""Build -> train every subset -> held-out matrix -> report, skipping stages that are current.

Usage:
    python pipeline.py experiment=smoke                      # CPU, offline, a few minutes (the README's main command)
    python pipeline.py experiment=paper                      # the paper's sweep on one GPU machine
    python pipeline.py experiment=paper sources.root=../shared/data/raw train.subsets=[safety_code,all]
    python pipeline.py experiment=smoke train.launcher=slurm_local   # training jobs through Slurm (submitit)
    python pipeline.py experiment=smoke dry_run=true         # what would run, and why
    python pipeline.py experiment=smoke force=[eval]         # rerun a stage although it is current

Each stage's config is composed in-process from the overrides the pipeline derives, and the stage
answers whether its output is current for it (automon.{data,training,evaluation}.status); a current
stage is skipped, so a second run does no work. A stage with work left runs as its own command
(data_build/build.py, train/sft.py, eval/holdout.py with the same overrides; printed and logged
under evals/<name>/pipeline/logs/).
Exit status: 0 done, 2 a problem to fix (message on stderr), 128+signal stopped.
"""

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)

import sys
from pathlib import Path

from automon.config.pipeline import register
from automon.errors import entry
from automon.pipeline import run

register()


@entry(config_path="conf", config_name="pipeline")
def main(cfg) -> None:
    status = run(cfg, Path(__file__).resolve().parent)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    main()
