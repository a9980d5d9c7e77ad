"""An LLM judge: the base model, one LoRA adapter on it, or a model behind an API, asked the monitor
prompt. Every judge of an evaluation is served by one scoring backend (automon.backends: vllm, hf,
openai), built once with every adapter that has something to score (`Resources.judge`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from automon.backends.base import Judge, JudgeRequest, LoraAdapter
from automon.monitors.base import Monitor, Prediction, Rendered, Resources
from automon.prompts import get_template, parse_answer


@dataclass(eq=False)
class JudgeMonitor(Monitor):
    prompt: str = "direct_v1"      # the prompt's one name (automon.prompts.templates.TEMPLATES)
    threshold: float = 0.5         # direct prompt: flag when P(yes) >= threshold
    judge: Judge | None = field(default=None, repr=False)

    @property
    def lora(self) -> LoraAdapter | None:
        if self.artifact_dir is None:
            return None
        return LoraAdapter(name=self.name, path=str(self.artifact_dir), rank=int(self.rank or 0))

    def load(self, resources: Resources) -> None:
        self.judge = resources.judge()

    @property
    def engine(self) -> Judge | None:
        return self.judge

    def request(self, it: Rendered) -> JudgeRequest:
        return JudgeRequest(id=it.sample.id, messages=it.messages, prompt=it.prompt,
                            adapter=self.name if self.artifact_dir is not None else None)

    def score(self, items: Sequence[Rendered]) -> list[Prediction]:
        return self.score_together([(self, items)])[0]

    @classmethod
    def score_together(cls, parts: Sequence[tuple[Monitor, Sequence[Rendered]]]) -> list[list[Prediction]]:
        """Judges of one backend in one call, the base model's and every adapter's requests mixed."""
        judge = parts[0][0].judge  # type: ignore[attr-defined]
        if judge is None:
            raise RuntimeError(f"monitor {parts[0][0].name}: load() before score()")
        out = judge.score([m.request(it) for m, items in parts for it in items])  # type: ignore[attr-defined]
        preds = [Prediction(p_yes=r.p_yes, text=r.text, mass=r.mass, error=r.error) for r in out]
        split, k = [], 0
        for _, items in parts:
            split.append(preds[k:k + len(items)])
            k += len(items)
        return split

    def flag(self, p: Prediction) -> int | None:
        if p.error is not None:
            return None
        if get_template(self.prompt).kind == "direct" and p.p_yes is not None:
            return int(p.p_yes >= self.threshold)
        # evidence, or a direct answer without logprobs (some API servers): what the answer says
        return parse_answer(p.text or "", self.prompt).pred

    @property
    def gives_quotes(self) -> bool:
        return get_template(self.prompt).kind == "evidence"

    def quotes(self, p: Prediction) -> list[str] | None:
        """An evidence answer's quotes ([] for a verdict without an evidence list); None for a failed or
        unreadable answer, or a prompt that asks for none."""
        if not self.gives_quotes or p.error is not None:
            return None
        v = parse_answer(p.text or "", self.prompt)
        return None if v.pred is None else list(v.evidence or [])
