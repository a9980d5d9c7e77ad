"""LoRA SFT of the monitor on a data build (docs/training.md).

Usage:
    python train/sft.py subset=safety_code                          # Qwen3-4B-Instruct-2507, one GPU
    python train/sft.py subset=all model=qwen3_8b prompt=evidence_v1
    python train/sft.py subset=[safety_qa,sg_code] train.lr=2e-4      # a list of subsets
    python train/sft.py subset=sg_code model=tiny data.dir=data/builds/default train.max_steps=30 output_dir=runs/x  # CPU
    python train/sft.py subset=safety_code --cfg job                # print the resolved config

Rerunning the same command resumes from the last checkpoint; SIGTERM/SIGUSR1 save one and stop.
Exit status: 0 done, 2 a problem to fix (message on stderr), 128+signal stopped after a checkpoint.
"""

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)

import sys
from pathlib import Path

from automon.config.train import register
from automon.errors import entry
from automon.training import USER_ERRORS, run
from automon.training.cli import preflight_or_exit

register()


@entry(config_path="../conf", config_name="sft", also=USER_ERRORS)
def main(cfg) -> int:
    return run(cfg)


if __name__ == "__main__":
    preflight_or_exit(sys.argv[1:], Path(__file__).resolve().parent.parent / "conf")
    main()
