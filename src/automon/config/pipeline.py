"""Schema of conf/pipeline.yaml (pipeline.py): build -> train every subset -> held-out matrix -> report.

The pipeline composes each stage's config from the overrides it derives from this one, asks the
stage whether its output is current for that config, and runs each stage that is not as a
subprocess of its own command line with the same overrides (data_build/build.py, train/sft.py,
eval/holdout.py).
`conf/experiment/<name>.yaml` fills this schema for one study (smoke: CPU in minutes; paper: the
paper's sweep on one GPU machine). Unknown keys and typos fail at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from automon.subsets import ALL
from automon.subsets import names as subset_names

# probe: the probes an evaluation with backend=probe scores (eval.backend or an eval.also entry), trained
# by train/probe.py before it, like adapters; a pipeline without such an evaluation has none to train.
STAGES = ("build", "train", "probe", "eval")


@dataclass
class SourcesSection:
    # A local data root in the shared/data/raw layout (e.g. ../shared/data/raw). Null: see synthetic.
    root: Optional[str] = None
    # When root is null: true = generate automon's own small synthetic source tree (no network, not
    # real data; automon.sources.synthetic) into synthetic_dir; false = read every source from the hub.
    synthetic: bool = False
    synthetic_dir: str = "data/sources/synthetic-n${sources.synthetic_n}-seed${sources.synthetic_seed}"
    synthetic_n: int = 40      # items per source
    synthetic_seed: int = 0


@dataclass
class BuildSection:
    out: str = "data/builds/${name}"
    # Test pairs per subset, e.g. {safety_qa: 6}; empty = build.yaml's defaults (the paper's sizes);
    # ${automon.each_subset:6} = 6 for every registered subset.
    test: Dict[str, int] = field(default_factory=dict)
    # More `python data_build/build.py` overrides, verbatim (experiment's, then yours).
    args: List[str] = field(default_factory=list)
    extra_args: List[str] = field(default_factory=list)


@dataclass
class TrainSection:
    # One training run per entry: a subset name (automon.subsets), `all`, or a list such as
    # "[safety_qa,sg_code]". Runs land in runs_dir/<entry>. Default: every subset, then all.
    subsets: List[str] = field(default_factory=lambda: [*subset_names(), ALL])
    runs_dir: str = "runs/${name}"
    # More `python train/sft.py` overrides, verbatim (experiment's, then yours).
    args: List[str] = field(default_factory=list)
    extra_args: List[str] = field(default_factory=list)
    # Null: run here, `parallel` at a time. A conf/hydra/launcher preset (slurm_h100, slurm_local):
    # one Hydra multirun through that launcher for every run that is not current (it waits for them).
    launcher: Optional[str] = None
    launcher_args: List[str] = field(default_factory=list)  # e.g. [hydra.launcher.timeout_min=30]
    # Local runs at once. >1 splits the CPU threads between them (CPU smoke runs); keep 1 on one GPU.
    parallel: int = 1


@dataclass
class EvalSection:
    out: str = "evals/${name}"
    backend: str = "vllm"      # vllm (GPU) | hf (CPU or GPU)
    # More `python eval/holdout.py` overrides, verbatim (experiment's, then yours).
    args: List[str] = field(default_factory=list)
    extra_args: List[str] = field(default_factory=list)
    # Further evaluations of the same build, each into <out>/<name>: the main evaluation's overrides
    # with these merged in (a key given here replaces the main one's, e.g. [backend=probe,
    # backend.features=minilm, sweep_dir=null]). With any, every monitor of every evaluation also goes
    # into one combined matrix and report in <out>/combined (automon.report.combined).
    also: Dict[str, List[str]] = field(default_factory=dict)
    # Copy the combined results and each evaluation's report, metrics, config and predictions
    # (gzipped) here, e.g. docs/results/mini. Null: nowhere.
    publish: Optional[str] = None


@dataclass
class MonitorSection:
    """The monitor model, the same for training and evaluation (named as the stages' groups)."""
    model: str = "qwen3_4b_instruct_2507"  # conf/model/<name>.yaml
    prompt: str = "direct_v1"              # conf/prompt/<name>.yaml (the prompt's one name)


@dataclass
class PipelineConfig:
    name: str = "smoke"        # names every output location (data/builds/<name>, runs/<name>, evals/<name>)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    stages: List[str] = field(default_factory=lambda: list(STAGES))
    # Stages to run even when their outputs are complete and current (e.g. [eval]).
    force: List[str] = field(default_factory=list)
    dry_run: bool = False      # print what would run and why, run nothing
    python: Optional[str] = None  # interpreter for the stages; null: the one running pipeline.py
    # Extra environment for the stage subprocesses (e.g. HF_HUB_OFFLINE: "1").
    env: Dict[str, str] = field(default_factory=dict)
    echo: bool = True          # stream the stages' output (it always goes to <state_dir>/logs/ too)
    state_dir: str = "${eval.out}/pipeline"  # pipeline_state.json + logs/
    sources: SourcesSection = field(default_factory=SourcesSection)
    build: BuildSection = field(default_factory=BuildSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)


def register(cs: ConfigStore | None = None) -> None:
    cs = cs or ConfigStore.instance()
    cs.store(name="pipeline_schema", node=PipelineConfig)
    # `build.test: ${automon.each_subset:6}` (conf/experiment/smoke.yaml): a size for every subset,
    # without listing them.
    OmegaConf.register_new_resolver("automon.each_subset", lambda pairs: {n: int(pairs) for n in subset_names()},
                                    replace=True)
