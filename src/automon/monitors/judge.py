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
        if self.adapter_dir is None:
            return None
        return LoraAdapter(name=self.name, path=str(self.adapter_dir), rank=int(self.rank or 0))

    def load(self, resources: Resources) -> None:
        self.judge = resources.judge()

    def score(self, items: Sequence[Rendered]) -> list[Prediction]:
        if self.judge is None:
            raise RuntimeError(f"monitor {self.name}: load() before score()")
        adapter = self.name if self.adapter_dir is not None else None
        out = self.judge.score([JudgeRequest(id=it.sample.id, messages=it.messages, prompt=it.prompt, adapter=adapter)
                                for it in items])
        return [Prediction(p_yes=r.p_yes, text=r.text, mass=r.mass, error=r.error) for r in out]

    def flag(self, p: Prediction) -> int | None:
        if p.error is not None:
            return None
        if get_template(self.prompt).kind == "direct" and p.p_yes is not None:
            return int(p.p_yes >= self.threshold)
        # evidence, or a direct answer without logprobs (some API servers): what the answer says
        return parse_answer(p.text or "", self.prompt).pred
