"""What a monitor is: something that reads samples and says, per sample, how likely it is misbehavior.

`Monitor.score(items) -> list[Prediction]` is the whole contract. An item is a sample with the
monitor prompt the shared renderer made for it (`Rendered`): a judge reads the prompt, a probe reads
the sample. A monitor that learns in-process has `fit(...)`; a LoRA judge is trained by train/sft.py
and a probe by train/probe.py, and each then only loads its artifact. `flag(prediction)` is the
monitor's decision (1 = flagged), `describe()` what metrics.json records about it.

Kinds of monitor (each a subclass, one module each): judge.py (the base model, a LoRA adapter, a
model behind an API: one scoring backend serves them), probe.py (a classifier on frozen features),
fused.py (a wrapper fusing another monitor's score with OOD detector scores).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from automon.adapter_meta import AdapterMeta
from automon.backends.base import Judge, JudgeTiming, LoraAdapter
from automon.schema import Sample
from automon.subsets import ALL
from automon.subsets import names as subset_names

BASE = "base"  # the base model's monitor name and matrix row name


@dataclass
class Rendered:
    """One sample as a monitor gets it: the sample and its monitor prompt (automon.prompts.fit_prompts)."""
    sample: Sample
    messages: list[dict[str, str]]
    prompt: str | None        # None when no local tokenizer renders (openai backend)
    prompt_sha: str           # what the prediction cache checks: the exact messages + thinking flag
    shortened: int = 0        # response + request tokens removed to fit max_seq_length


def messages_sha(messages: list[dict[str, str]], enable_thinking: bool) -> str:
    blob = json.dumps({"messages": messages, "enable_thinking": bool(enable_thinking)},
                      ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Prediction:
    """A monitor's answer on one sample."""
    p_yes: float | None = None   # judge: P(yes) (direct) or P(true) at the verdict (evidence); probe: P(misbehavior)
    text: str | None = None      # judge: the answer as generated / the argmax first token (direct)
    mass: float | None = None    # judge: total probability of the yes/no (true/false) spellings read
    error: str | None = None     # the request failed (not cached; the next run asks again)
    fused: float | None = None   # fused monitor: the fused score (standardised units, not a probability)

    @property
    def score(self) -> float | None:
        """What thresholds, AUROC and curves read: the fused score of a fused monitor, else P(yes)."""
        return self.fused if self.fused is not None else self.p_yes


@dataclass
class Resources:
    """What monitors may load before they score, built only when some prediction is missing from the
    cache: one judge backend for every judge monitor (vLLM serves the base model and all adapters
    from one engine), and the build's training split (a probe not trained yet is fitted on it)."""
    make_judge: Callable[[list[LoraAdapter]], Judge]
    adapters: list[LoraAdapter]
    train_split: Callable[[str], Sequence[Sample]]   # build directory -> its training samples
    timing: JudgeTiming = field(default_factory=JudgeTiming)
    _judge: Judge | None = None

    def judge(self) -> Judge:
        if self._judge is None:
            self._judge = self.make_judge(self.adapters)
            self.timing = self._judge.timing
        return self._judge

    def close(self) -> None:
        if self._judge is not None:
            self._judge.close()


@dataclass(eq=False)
class Monitor:
    """The fields every monitor has; a subclass implements `score` (and `load`, `fit` as it needs)."""
    name: str                      # unique, directory-safe ("base", the run's directory name, "<features>-<subset>")
    # Its row name in the transfer matrix: "base" or the training subset (metrics.json and identity.json
    # spell the key "label", as they always have; a sample's 0/1 label is Sample.label).
    row: str
    # The trained artifact: a PEFT adapter for a LoRA judge, a fitted probe's directory for a probe;
    # None for the base model.
    artifact_dir: Path | None = None
    artifact_hash: str | None = None  # its content (adapter) or identity (probe) hash
    rank: int | None = None
    meta: AdapterMeta | None = None
    mismatches: list[str] = field(default_factory=list)
    # The monitor kind metrics.json records as monitor.kind: "lora" for the base model and adapters
    # (the key results have always carried), "probe" for probes.
    monitor_kind: ClassVar[str] = "lora"

    def load(self, resources: Resources) -> None:
        """Get ready to score (called only when something is missing from the prediction cache)."""

    def score(self, items: Sequence[Rendered]) -> list[Prediction]:
        raise NotImplementedError(f"{type(self).__name__} must score")

    @property
    def engine(self) -> Any:
        """What scores for it, when monitors share one (their judge backend); None: itself alone."""
        return None

    @classmethod
    def score_together(cls, parts: Sequence[tuple["Monitor", Sequence[Rendered]]]) -> list[list[Prediction]]:
        """Several monitors of this class sharing one `engine`, scored at once (a subclass sends them in
        one call: vLLM serves the base model and every adapter in one llm.chat); here one by one."""
        return [m.score(items) for m, items in parts]

    def flag(self, p: Prediction) -> int | None:
        """1 = flagged as misbehavior, 0 = not, None = no decision (failed or unreadable)."""
        raise NotImplementedError(f"{type(self).__name__} must decide")

    @property
    def gives_quotes(self) -> bool:
        """Whether its answers quote their evidence (then `quotes` reads them and the evaluation scores
        them against the gold spans, automon.evidence); a score or a yes/no quotes nothing."""
        return False

    def quotes(self, p: Prediction) -> list[str] | None:
        """The quotes of an answer; None where it has none to read (a failed or unreadable answer, or a
        monitor that does not quote)."""
        return None

    @property
    def in_distribution(self) -> str:
        """The subset it was trained on (its in-distribution samples: far_reference, fusion); `all`
        for the base model, which has no training distribution of its own."""
        if self.meta is not None and self.meta.subset:
            return self.meta.subset
        return self.row if self.row in (*subset_names(), ALL) else ALL

    @property
    def lora(self) -> LoraAdapter | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.row, "kind": self.monitor_kind,
                "artifact": str(self.artifact_dir) if self.artifact_dir else None,
                "artifact_hash": self.artifact_hash, "lora_rank": self.rank,
                "trained_on": self.meta.subset if self.meta else None,
                "train_data_manifest_hash": self.meta.data_manifest_hash if self.meta else None,
                "mismatches": self.mismatches}
