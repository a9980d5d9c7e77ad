"""Schema of conf/holdout.yaml (eval/holdout.py). Unknown keys and wrong types fail at start-up."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

from automon.config.common import ModelConfig, PromptConfig, WandbConfig, register_common
from automon.prompts import PROMPT_NAMES, get_template
from automon.schema import SUBSETS

BACKENDS = ("vllm", "hf", "openai")
# How answers that could not be read (unparseable evidence JSON, failed API calls) are scored.
#   wrong:    the monitor failed either way: FN on a misbehavior sample, FP on a benign one (default)
#   positive: treated as "flagged" (escalate what you cannot read)
#   negative: treated as "not flagged"
#   exclude:  dropped from MR/FAR denominators (can flatter a monitor; the count is still reported)
UNPARSEABLE_POLICIES = ("wrong", "positive", "negative", "exclude")


class ConfigError(ValueError):
    """A configuration that cannot work; the message says what to change."""


@dataclass
class BackendConfig:
    """conf/backend/<name>.yaml. One schema for all backends; each uses the fields it needs."""
    name: str = "vllm"  # vllm | hf | openai
    # Prompts handed to the backend per call; the prediction cache is flushed after each call,
    # so a killed run loses at most this many predictions per monitor.
    chunk_size: int = 512
    # hf: prompts per forward pass (sorted by length, left-padded) and a cap on padded tokens per pass.
    batch_size: int = 16
    max_batch_tokens: int = 65536
    # Prompt + answer token budget. Longer monitored responses are shortened in the middle (head and
    # tail kept, marker in between) by the shared renderer, counted and reported. Null: no limit
    # (the openai backend has no tokenizer to measure with and never shortens).
    max_seq_length: Optional[int] = 32768
    # Tokens generated for the evidence prompt (the direct prompt reads one token).
    max_new_tokens: int = 256
    # hf: cpu | cuda | auto; dtype override (null: model.dtype; bfloat16 becomes float32 on CPU).
    device: str = "auto"
    dtype: Optional[str] = None
    # vllm engine options (shared/docs/apis.md s5a). max_lora_rank is read from the adapters.
    gpu_memory_utilization: float = 0.9
    max_model_len: Optional[int] = None  # null: max_seq_length
    max_loras: int = 4                    # adapters batched together in one step
    enable_prefix_caching: bool = True    # few-shot prefixes and the system prompt are shared
    max_num_seqs: Optional[int] = None
    structured_outputs_backend: str = "auto"  # auto | xgrammar | guidance | outlines | lm-format-enforcer
    enforce_eager: bool = False
    seed: int = 0


@dataclass
class JudgeConfig:
    """The openai backend: any OpenAI-compatible chat-completions server."""
    # Model id sent with each request. Null: model.pretrained (e.g. for `vllm serve <model>`).
    # With a LoRA served by `vllm serve --lora-modules NAME=PATH`, requests for an adapter use the
    # adapter's run name (its directory name) as the model id.
    model_name: Optional[str] = None
    base_url: Optional[str] = None  # null: the official OpenAI endpoint
    # NAME of the environment variable that holds the key. The key itself never enters the config,
    # the cache, any output file or any log. Loopback servers without auth need no key.
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8          # requests in flight at once
    max_retries: int = 5          # for connection errors, timeouts, 429 and 5xx (not for 4xx)
    backoff_s: float = 1.0        # first retry delay; doubles each retry (with jitter), capped at 60 s
    timeout_s: float = 120.0
    # Ask for top_logprobs to read P(yes). Servers that ignore it (transformers serve) fall back to
    # parsing the text answer (p_yes null then).
    logprobs: bool = True
    top_logprobs: int = 20
    direct_max_tokens: int = 4    # enough to read "yes"/"no" from the text when no logprobs come back
    # Evidence prompt: send response_format=json_schema (structured output).
    structured_output: bool = True
    # Send chat_template_kwargs={"enable_thinking": model.enable_thinking} (vllm serve and transformers
    # serve understand it; the official OpenAI API rejects unknown fields, so keep false there).
    send_chat_template_kwargs: bool = False
    extra_body: Dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = 0


@dataclass
class DataConfig:
    dir: str = "data/builds/v1"
    subsets: List[str] = field(default_factory=lambda: list(SUBSETS))
    # Smoke runs: keep the first N pairs (by pair_id order) of each subset. Null: all.
    max_pairs_per_subset: Optional[int] = None


@dataclass
class BootstrapConfig:
    n: int = 1000      # replicates; CIs resample PAIRS (a twin pair is one unit)
    seed: int = 0
    ci: float = 0.95


@dataclass
class HoldoutConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    data: DataConfig = field(default_factory=DataConfig)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    # A trained adapter directory (<run>/adapter); null scores the base model.
    adapter: Optional[str] = None
    # A directory whose subdirectories each hold adapter/: every adapter plus the base model -> matrix.
    sweep_dir: Optional[str] = None
    include_base: bool = True  # sweep: also score the base model (the "base" row, deltas need it)
    # Few-shot examples: k label-balanced examples from the TRAINING split, chosen by shots_seed,
    # the same for every test sample (so vLLM's prefix cache shares them).
    shots: int = 0
    shots_seed: int = 0
    shots_max_chars: int = 3000  # only short training examples become shots (request + response chars)
    threshold: float = 0.5       # direct prompt: pred = P(yes) >= threshold
    unparseable: str = "wrong"   # wrong | positive | negative | exclude (see UNPARSEABLE_POLICIES)
    far_targets: List[float] = field(default_factory=lambda: [0.05, 0.10])
    allow_mismatch: bool = False
    # Null: evals/<model>__<adapter run name | base | sweep-NAME>__<prompt>__shots<k>
    output_dir: Optional[str] = None
    # Null: <output_dir>/cache. Point several evaluations at one directory to share predictions.
    cache_dir: Optional[str] = None
    progress: bool = True

    def __post_init__(self) -> None:
        b = self.backend
        if b.name not in BACKENDS:
            raise ConfigError(f"backend.name={b.name!r}; choose one of {', '.join(BACKENDS)}")
        if self.unparseable not in UNPARSEABLE_POLICIES:
            raise ConfigError(f"unparseable={self.unparseable!r}; choose one of {', '.join(UNPARSEABLE_POLICIES)}")
        if self.adapter and self.sweep_dir:
            raise ConfigError("give either adapter=<dir> or sweep_dir=<dir>, not both")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"threshold={self.threshold} must lie in [0, 1]")
        if self.shots < 0:
            raise ConfigError(f"shots={self.shots} must be >= 0")
        if self.prompt.name not in PROMPT_NAMES:
            raise ConfigError(f"unknown prompt {self.prompt.name!r}; choose prompt=<name> with one of: "
                              f"{', '.join(PROMPT_NAMES)}")
        # Prompts are fitted to max_seq_length - answer_reserve, the budget training uses, so what is
        # generated must fit in the reserve (the direct prompt reads one token).
        tpl = get_template(self.prompt.name)
        generated = 1 if tpl.kind == "direct" else b.max_new_tokens
        if b.max_seq_length is not None and generated > tpl.answer_reserve:
            raise ConfigError(f"backend.max_new_tokens={generated} is more than the {tpl.answer_reserve} tokens "
                              f"prompt={tpl.name} reserves for its answer: prompts are fitted to "
                              f"backend.max_seq_length - {tpl.answer_reserve} tokens, as in training, so a longer "
                              f"answer could overrun backend.max_seq_length. Set backend.max_new_tokens<="
                              f"{tpl.answer_reserve}")
        bad = [s for s in self.data.subsets if s not in SUBSETS]
        if bad or not self.data.subsets:
            raise ConfigError(f"data.subsets has unknown {bad or 'nothing'}; valid: {', '.join(SUBSETS)}")
        if any(not (0 < t < 1) or math.isnan(t) for t in self.far_targets):
            raise ConfigError(f"far_targets={self.far_targets} must lie strictly between 0 and 1")
        if self.bootstrap.n < 0 or not 0 < self.bootstrap.ci < 1:
            raise ConfigError("bootstrap.n must be >= 0 and bootstrap.ci in (0, 1)")
        if b.batch_size < 1 or b.chunk_size < 1 or self.judge.concurrency < 1:
            raise ConfigError("backend.batch_size, backend.chunk_size and judge.concurrency must be >= 1")
        if b.max_seq_length is not None and b.max_seq_length <= b.max_new_tokens + 64:
            raise ConfigError(f"backend.max_seq_length={b.max_seq_length} leaves no room for a prompt "
                              f"(max_new_tokens={b.max_new_tokens})")
        if self.model.name == "api" and b.name != "openai":
            raise ConfigError("model=api is the placeholder for backend=openai; pick a real model "
                              "(e.g. model=qwen3_4b_instruct_2507) for the vllm or hf backend")
        if b.name == "openai" and self.model.name == "api" and not self.judge.model_name:
            raise ConfigError("backend=openai model=api needs judge.model_name=<the server's model id>, "
                              "e.g. judge.model_name=gpt-4o-mini")


def register(cs: ConfigStore | None = None) -> None:
    cs = cs or ConfigStore.instance()
    register_common(cs)
    cs.store(name="holdout_schema", node=HoldoutConfig)
    cs.store(group="backend", name="backend_schema", node=BackendConfig)
