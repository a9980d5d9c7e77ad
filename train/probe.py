"""Train one probe (a logistic regression on features of the sample) on one subset of a data build.

Usage:
    python train/probe.py features=lexical train_subset=safety_code                 # TF-IDF word 1-2 grams
    python train/probe.py features=minilm train_subset=all data.dir=data/builds/default
    python train/probe.py features=hidden model=smollm2_135m_instruct train_subset=sg_code

The probe goes to <cache_dir or $AUTOMON_CACHE>/probes/<identity hash>, where
`python eval/holdout.py backend=probe` with the same settings finds it; rerunning is a no-op.
"""

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)
from automon.config.probe import register
from automon.errors import entry
from automon.evaluation import USER_ERRORS
from automon.training.probe import run

register()


@entry(config_path="../conf", config_name="probe", also=USER_ERRORS)
def main(cfg) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
