"""automon-bench as an inspect_ai task: one inspect Sample per test sample, its input the monitor prompt's
messages from automon's one renderer, scored by automon's parser and metrics (automon.inspect_task.scorer).

    inspect eval eval/inspect_task.py -T data_dir=data/builds/default -T subsets=syco_qa,sg_code --model openai/gpt-4o-mini
    inspect eval automon/automon_bench -T prompt=evidence_v1 --model vllm/Qwen/Qwen3-8B   # the registered task

The samples are the ones eval/holdout.py scores with the same settings (data.subsets,
data.max_pairs_per_subset, shots from the TRAINING split by shots_seed): automon.evaluation.inputs picks
them and automon.evaluation.requests renders them. With `tokenizer=<conf/model option>` (e.g.
qwen3_4b_instruct_2507) prompts are fitted to `max_seq_length` tokens of that tokenizer exactly as
backend=hf/vllm fit them; without one they go out whole, as backend=openai sends them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, GenerateConfig, ResponseSchema
from inspect_ai.solver import generate
from inspect_ai.util import JSONSchema

from automon.backends.base import EVIDENCE_JSON_SCHEMA, BackendConfig
from automon.backends.openai_api import OpenAIConfig
from automon.config.common import DEFAULT_BUILD_DIR
from automon.config.eval import UNPARSEABLE_POLICIES, HoldoutConfig
from automon.data.io import load_build
from automon.errors import ConfigError
from automon.evaluation.fewshot import select_shots
from automon.evaluation.inputs import pick_test_samples
from automon.evaluation.requests import render_all
from automon.evaluation.rows import sample_fields
from automon.inspect_task.scorer import automon_metric_list, automon_scorer
from automon.monitors import Rendered
from automon.prompts import FIT_VERSION, PROMPT_NAMES, get_template
from automon.release import release_line
from automon.schema import SUBSETS

INSPECT_TASK_VERSION = "inspect_task_v2"  # bump when a sample's input, target, metadata or the config changes
_ROLES = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}


def _default(key: str) -> Any:
    """eval/holdout.py's default for a key the task shares with it (one home for each default)."""
    return HoldoutConfig.__dataclass_fields__[key].default


def as_subsets(subsets: str | Sequence[str] | None) -> list[str]:
    """`-T subsets=syco_qa,sg_code` (a string), a list, or None (every subset)."""
    if subsets is None:
        return list(SUBSETS)
    names = [s.strip() for s in subsets.split(",")] if isinstance(subsets, str) else [str(s) for s in subsets]
    bad = [s for s in names if s not in SUBSETS]
    if bad or not names:
        raise ConfigError(f"subsets={subsets!r} has unknown {bad or 'nothing'}; valid: {', '.join(SUBSETS)}")
    return names


def rendered_samples(data_dir: str, subsets: Sequence[str], prompt: str, shots: int, shots_seed: int,
                     shots_max_chars: int, max_pairs_per_subset: int | None, tokenizer: str | None,
                     max_seq_length: int | None) -> tuple[Any, list[Rendered], list[str]]:
    """(the build, its test samples' rendered prompts, the shots' ids), as eval/holdout.py makes them."""
    build = load_build(data_dir)
    test = pick_test_samples(build.samples("test"), subsets, max_pairs_per_subset)
    shot_samples = select_shots(build.samples("train"), shots, shots_seed, shots_max_chars, test) if shots else []
    tok, thinking = None, False
    if tokenizer is not None:
        # the tokenizer's package is heavy (transformers) and only this option needs it
        from automon.models.loading import shared_tokenizer
        # conf/model/<name>.yaml, read as the policy and paraphrase models are
        from automon.policy.run import model_config

        model = model_config(tokenizer, key="tokenizer")
        tok, thinking = shared_tokenizer(model), model.enable_thinking
    items = render_all(test, prompt=prompt, shots=shot_samples, tokenizer=tok, enable_thinking=thinking,
                       max_seq_length=max_seq_length if tok is not None else None)
    return build, items, [s.id for s in shot_samples]


def inspect_sample(it: Rendered) -> Sample:
    """One test sample as inspect's: id, the rendered messages, target = the label as the direct prompt
    answers it, metadata = its fields (subset, pair, group, control kind, ...), its prompt's hash and, where
    it has gold evidence, the gold quotes and the response they are in (the scorer scores an evidence
    answer's quotes against them, as eval/holdout.py does)."""
    s = it.sample
    fields = sample_fields(s)
    gold = {"gold_evidence": list(s.evidence), "response": s.response} if s.evidence else {}
    return Sample(id=s.id, input=[_ROLES[m["role"]](content=m["content"]) for m in it.messages],
                  target="yes" if s.label == 1 else "no",
                  metadata={**fields, "source": s.source, "shortened": it.shortened, "prompt_sha": it.prompt_sha,
                            **gold})


def generate_config(prompt: str, max_new_tokens: int, logprobs: bool, top_logprobs: int,
                    structured_output: bool, seed: int | None) -> GenerateConfig:
    """Greedy, as backend=openai asks: a few tokens for yes/no (P(yes) from the first token's
    log-probabilities where the provider returns them), the JSON verdict under the evidence schema as
    structured output where the provider supports it."""
    kind = get_template(prompt).kind
    schema = None
    if kind == "evidence" and structured_output:
        schema = ResponseSchema(name="monitor_verdict", json_schema=JSONSchema.model_validate(EVIDENCE_JSON_SCHEMA),
                                strict=True)
    return GenerateConfig(temperature=0.0, seed=seed,
                          max_tokens=OpenAIConfig.direct_max_tokens if kind == "direct" else max_new_tokens,
                          logprobs=logprobs or None, top_logprobs=top_logprobs if logprobs else None,
                          response_schema=schema)


@task
def automon_bench(data_dir: str = DEFAULT_BUILD_DIR, subsets: str | list[str] | None = None,
                  prompt: str = "direct_v1", shots: int = 0, shots_seed: int = 0,
                  shots_max_chars: int = _default("shots_max_chars"), max_pairs_per_subset: int | None = None,
                  tokenizer: str | None = None, max_seq_length: int | None = BackendConfig.max_seq_length,
                  threshold: float = _default("threshold"), unparseable: str = _default("unparseable"),
                  max_new_tokens: int = OpenAIConfig.max_new_tokens, logprobs: bool = True,
                  top_logprobs: int = OpenAIConfig.top_logprobs, structured_output: bool = True,
                  seed: int | None = 0) -> Task:
    """automon-bench's held-out test set as a monitor benchmark: does the monitor flag misbehavior (MR)
    without false alarms on the benign twins (FAR) and on the contrast controls (far_<kind>)?

    Args:
      data_dir: the data build (test.jsonl, train.jsonl, manifest.json).
      subsets: comma-separated test subsets (default: all).
      prompt: the monitor prompt (direct_v1: yes/no; evidence_v1: a JSON verdict with quotes).
      shots: few-shot examples from the TRAINING split, chosen by shots_seed (shorter than shots_max_chars).
      max_pairs_per_subset: the first N pairs of each subset, with their controls (smoke runs).
      tokenizer: a conf/model option whose tokenizer fits prompts to max_seq_length (default: none, sent whole).
      threshold: the direct prompt flags at P(yes) >= threshold where log-probabilities come back.
      unparseable: how an unreadable answer counts: wrong | positive | negative | exclude.
      max_new_tokens: the evidence answer's budget.
      logprobs, top_logprobs: ask for log-probabilities (P(yes)); providers without them give text only.
      structured_output: the evidence prompt's JSON schema as the provider's structured output.
      seed: the generation seed, where the provider takes one.
    """
    if prompt not in PROMPT_NAMES:
        raise ConfigError(f"prompt={prompt!r} is not a prompt; use one of: {', '.join(PROMPT_NAMES)}")
    if unparseable not in UNPARSEABLE_POLICIES:
        raise ConfigError(f"unparseable={unparseable!r}; use one of: {', '.join(UNPARSEABLE_POLICIES)}")
    if shots < 0 or (max_pairs_per_subset is not None and max_pairs_per_subset < 1) or not 0 <= threshold <= 1:
        raise ConfigError("shots must be >= 0, max_pairs_per_subset >= 1 (or None) and threshold in [0, 1]")
    names = as_subsets(subsets)
    build, items, shot_ids = rendered_samples(str(data_dir), names, prompt, shots, shots_seed, shots_max_chars,
                                              max_pairs_per_subset, tokenizer, max_seq_length)
    task_args = {"data_dir": str(data_dir), "subsets": names, "prompt": prompt, "shots": shots, "shots_seed": shots_seed,
                 "shots_max_chars": shots_max_chars, "max_pairs_per_subset": max_pairs_per_subset,
                 "tokenizer": tokenizer, "max_seq_length": max_seq_length if tokenizer else None,
                 "threshold": threshold, "unparseable": unparseable}
    return Task(
        dataset=MemoryDataset([inspect_sample(it) for it in items], name=f"automon-bench:{Path(build.path).name}"),
        solver=generate(),
        scorer=automon_scorer(prompt=prompt, threshold=threshold),
        metrics=automon_metric_list(unparseable),
        config=generate_config(prompt, max_new_tokens, logprobs, top_logprobs, structured_output, seed),
        metadata={"automon": {"task_version": INSPECT_TASK_VERSION, "task_args": task_args,
                              "manifest_hash": build.manifest_hash,
                              "release": release_line(build.manifest, build.manifest_hash),
                              "prompt_fit": FIT_VERSION, "shot_ids": shot_ids,
                              "n_shortened": sum(1 for it in items if it.shortened)}},
        version=INSPECT_TASK_VERSION,
    )
