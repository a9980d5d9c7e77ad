"""backend=inspect_log: the answers of an inspect_ai evaluation of automon's task (automon.inspect_task), read
from its log and scored by automon's own evaluation, so that a model run through any inspect provider
lands in the same predictions, metrics.json, report and matrix as automon's own monitors.

    python eval/holdout.py backend=inspect_log backend.log=logs/<...>.eval data.dir=<the task's data_dir>

Nothing is asked of a model: each request is answered by the log's sample of the same id, read as
automon reads an OpenAI-compatible answer (automon.backends.base.read_answer: the text, and P(yes) from
the log-probabilities where the provider returned them). The log must be of the same prompt, shots,
subsets and pairs as the evaluation (checked at start-up against the task's arguments) and of the same
messages (checked per sample where the task did not shorten them). The log's file sha256, task and model
are the evaluation's identity (`source_identity`): another log is another evaluation. inspect-ai is an
optional dependency (pip install 'automon[inspect]'), imported only when a log is read.
"""

from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional, Sequence

from automon.backends.base import BackendConfig, JudgeError, JudgeRequest, JudgeResult, JudgeTiming, LoraAdapter, read_answer
from automon.errors import ConfigError
from automon.models.loading import API_MODEL

# The automon_bench task's arguments that decide which prompts its samples are and how its answers are
# decided and counted, by the evaluation key that must equal each (the task spells data.subsets and
# data.max_pairs_per_subset without "data.").
TASK_ARGS = {"prompt": "prompt.name", "shots": "shots", "shots_seed": "shots_seed",
             "shots_max_chars": "shots_max_chars", "subsets": "data.subsets",
             "max_pairs_per_subset": "data.max_pairs_per_subset", "threshold": "threshold",
             "unparseable": "unparseable"}


def _inspect_log_module() -> Any:
    try:
        # inspect-ai is optional (automon[inspect]) and heavy: only a log read needs it
        from inspect_ai import log as inspect_log
    except ImportError as e:
        raise ConfigError("backend=inspect_log reads inspect_ai logs and needs inspect-ai: "
                          "pip install -e '.[inspect]'") from e
    return inspect_log


@dataclass(frozen=True)
class LogInfo:
    """What identifies an inspect log: its file and bytes, and the task and model that made it."""
    path: str
    sha256: str
    task: str
    model: str
    task_args: dict
    automon: dict   # the task's metadata["automon"]: build hash, prompt, shots, ... (automon.inspect_task)
    inspect_version: str

    def source(self) -> dict[str, Any]:
        return {"kind": "inspect_log", "log": self.path, "sha256": self.sha256, "task": self.task,
                "model": self.model, "inspect_ai": self.inspect_version}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def log_info(path: str) -> LogInfo:
    """The log's header (read once per file version)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"backend.log={path}: no such file; give an inspect log (.eval or .json) of the "
                          "automon_bench task")
    st = p.stat()
    return _log_info(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _log_info(path: str, size: int, mtime_ns: int) -> LogInfo:
    try:
        head = _inspect_log_module().read_eval_log(path, header_only=True)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input
        raise ConfigError(f"backend.log={path} is not an inspect log: {type(e).__name__}: {e}") from None
    meta = (head.eval.metadata or {}).get("automon")
    if not isinstance(meta, dict):
        raise ConfigError(f"backend.log={path} is a log of task {head.eval.task!r}, not of automon's task "
                          "(automon/automon_bench, eval/inspect_task.py): its samples are not automon's prompts")
    if head.status != "success":
        raise ConfigError(f"backend.log={path}: the inspect evaluation ended with status {head.status!r}; "
                          "rerun it (inspect eval-retry) until it succeeds")
    return LogInfo(path=path, sha256=_sha256(Path(path)), task=head.eval.task, model=head.eval.model,
                   task_args=dict(head.eval.task_args or {}), automon=meta,
                   inspect_version=str(head.eval.packages.get("inspect_ai", "")))


@dataclass
class InspectLogConfig(BackendConfig):
    """backend=inspect_log (conf/backend/inspect_log.yaml): answers read from an inspect_ai log."""
    name: str = "inspect_log"
    log: Optional[str] = None             # the inspect log (.eval or .json) of automon's task
    max_seq_length: Optional[int] = None  # the task fitted (or not) its prompts; nothing is fitted here

    local_model: ClassVar[bool] = False
    local_weights: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.log or not str(self.log).strip():
            raise ConfigError("backend=inspect_log needs backend.log=<the inspect log of automon's task>")

    def info(self) -> LogInfo:
        return log_info(str(self.log))

    def check_model(self, model: Any) -> None:
        """The log names its model: model= only names nothing (leave it at its default), never the API placeholder."""
        if model.name == API_MODEL:
            raise ConfigError(f"model={API_MODEL} is the placeholder for backend=openai; backend=inspect_log takes "
                              "its model from the log (leave model= at its default)")

    def check_eval(self, c: Any) -> None:
        """The evaluation asks for the prompts the log answered: the task's arguments, key by key."""
        args = self.info().automon.get("task_args", {})
        values = {"prompt.name": c.prompt.name, "shots": c.shots, "shots_seed": c.shots_seed,
                  "shots_max_chars": c.shots_max_chars, "data.subsets": list(c.data.subsets),
                  "data.max_pairs_per_subset": c.data.max_pairs_per_subset, "threshold": c.threshold,
                  "unparseable": c.unparseable}
        bad = [f"{key}={_spell(args[arg])}" for arg, key in TASK_ARGS.items()
               if arg in args and args[arg] != values[key]]
        if bad:
            raise ConfigError(f"backend.log={self.log} answered other prompts, or decided them otherwise, than "
                              f"this evaluation asks: set {' '.join(bad)} (the task's arguments)")
        if c.stress or c.far_reference:
            raise ConfigError("backend=inspect_log has the answers to the test prompts of the log only: leave "
                              "stress= and far_reference= out")

    def model_label(self, model: Any) -> str:
        return f"inspect-{self.info().model}"

    def source_identity(self) -> dict[str, Any]:
        return self.info().source()

    def cache_identity(self, model: Any, prompt_kind: str, adapter: str | None) -> dict[str, Any]:
        i = self.info()
        # (the generation budget was the task's; kept so that every backend's key has the same parts)
        return {"inspect_log_sha256": i.sha256, "model": i.model, **self.generation_identity(prompt_kind)}

    def make_judge(self, model: Any, prompt_kind: str, adapters: Sequence[LoraAdapter], tokenizer: Any) -> "InspectLogJudge":
        if adapters:
            raise JudgeError("backend=inspect_log scores the model of its log: no adapter= or sweep_dir=")
        return InspectLogJudge(self.info(), prompt_kind)


def _spell(v: Any) -> str:
    return "[" + ",".join(map(str, v)) + "]" if isinstance(v, list) else "null" if v is None else str(v)


def messages_of(inputs: Any) -> list[dict[str, str]]:
    """inspect chat messages as automon's {"role", "content"} dicts."""
    if isinstance(inputs, str):
        return [{"role": "user", "content": inputs}]
    return [{"role": m.role, "content": m.text} for m in inputs]


def answer_of(sample: Any, prompt_kind: str) -> JudgeResult:
    """One log sample's answer as a judge result (an errored sample: a failed request)."""
    if sample.error is not None:
        return JudgeResult(error=f"inspect: {sample.error.message}")
    out = sample.output
    if out is None or not out.choices:
        return JudgeResult(error="inspect: the sample has no model output")
    if out.error:
        return JudgeResult(error=f"inspect: {out.error}")
    choice = out.choices[0]
    return read_answer(out.completion, choice.logprobs.content if choice.logprobs else None, prompt_kind)


class InspectLogJudge:
    name = "inspect_log"

    def __init__(self, info: LogInfo, prompt_kind: str):
        t0 = time.perf_counter()
        log = _inspect_log_module().read_eval_log(info.path)
        self.info, self.prompt_kind = info, prompt_kind
        self.samples = {str(s.id): s for s in (log.samples or [])}
        self.timing = JudgeTiming(model_s=time.perf_counter() - t0)

    def score(self, requests: Sequence[JudgeRequest]) -> list[JudgeResult]:
        out = []
        for r in requests:
            s = self.samples.get(r.id)
            if s is None:
                out.append(JudgeResult(error=f"sample {r.id} is not in the inspect log {self.info.path}"))
            elif not (s.metadata or {}).get("shortened") and messages_of(s.input) != r.messages:
                out.append(JudgeResult(error=f"the inspect log's prompt for {r.id} is not the one automon renders "
                                             "(another build, prompt or shots)"))
            else:
                out.append(answer_of(s, self.prompt_kind))
        return out

    def close(self) -> None:
        pass
