"""Training examples: the shared fitted prompt + the supervised answer, tokenised, labels masked.

Every example is `input_ids = prompt_ids + answer_ids + [end_of_turn]` with `labels = -100` on the
prompt, so the loss is on the answer and the end-of-turn token only. The prompt is exactly what
evaluation scores: `automon.prompts.fit_prompts` renders it and fits it to `max_seq_length` minus the
prompt's answer reserve (response shortened in the middle, the request only when it must be), in both
stages. The answer is never cut and no sample is dropped (TRL would otherwise cut the answer and then
silently drop the example, apis.md s2c); an answer longer than the reserve is an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from automon.prompts import PromptFitError, answer_text, fit_prompts, get_template
from automon.schema import SUBSETS, Sample
from automon.training.errors import TrainConfigError

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
_SENTINEL = "@@AUTOMON_ANSWER_SENTINEL@@"


def select_samples(samples: Iterable[Sample], subsets: Sequence[str]) -> list[Sample]:
    """Training samples of the chosen subsets, in file order (the trainer shuffles by seed)."""
    want = set(subsets)
    bad = sorted(want - set(SUBSETS))
    if bad:
        raise TrainConfigError(f"unknown subset(s) {bad}; valid: {', '.join(SUBSETS)}, all")
    return [s for s in samples if s.subset in want]


def end_of_turn_token(tokenizer: Any) -> str:
    """The special token the chat template puts right after an assistant message (Qwen: <|im_end|>)."""
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}]
    text = tokenizer.apply_chat_template(msgs, tokenize=False)
    after = text[text.rindex(_SENTINEL) + len(_SENTINEL):]
    specials = sorted((t for t in tokenizer.get_added_vocab() if after.startswith(t)), key=len, reverse=True)
    if specials:
        return specials[0]
    if tokenizer.eos_token and after.startswith(tokenizer.eos_token):
        return tokenizer.eos_token
    raise TrainConfigError(f"cannot find the end-of-turn token of this chat template: after an assistant "
                           f"message it renders {after[:40]!r}")


@dataclass
class Example:
    """One tokenised training example and how it was made."""
    sample_id: str
    subset: str
    input_ids: list[int]
    labels: list[int]
    prompt: str            # the exact fitted prompt text (what evaluation scores for the same sample)
    answer: str            # answer_text(sample, prompt), without the end-of-turn token
    response_tokens_removed: int = 0
    request_tokens_removed: int = 0


@dataclass
class ExampleStats:
    n: int = 0
    responses_shortened: int = 0
    requests_shortened: int = 0
    tokens_removed: int = 0
    lengths: list[int] = field(default_factory=list)
    by_subset: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict:
        ls = sorted(self.lengths)

        def q(p: float) -> int:
            return ls[min(len(ls) - 1, int(p * len(ls)))] if ls else 0

        return {
            "samples": self.n,
            "by_subset": dict(sorted(self.by_subset.items())),
            "samples_shortened": self.responses_shortened,
            "requests_shortened": self.requests_shortened,
            "tokens_removed_by_shortening": self.tokens_removed,
            "tokens": sum(ls),
            "length_mean": round(sum(ls) / len(ls), 1) if ls else 0,
            "length_p50": q(0.5), "length_p95": q(0.95), "length_max": ls[-1] if ls else 0,
        }


class ExampleBuilder:
    """Renders and tokenises samples for one tokenizer / prompt / length limit (/ few-shot prefix)."""

    def __init__(self, tokenizer: Any, prompt: str, enable_thinking: bool, max_seq_length: int,
                 shots: Sequence[Sample] = ()):
        self.tok = tokenizer
        self.prompt = prompt
        self.enable_thinking = enable_thinking
        self.max_seq_length = max_seq_length
        self.shots = list(shots)
        self.reserve = get_template(prompt).answer_reserve
        self.eot = end_of_turn_token(tokenizer)
        self.eot_id = tokenizer.convert_tokens_to_ids(self.eot)

    def answer_ids(self, sample: Sample) -> tuple[str, list[int]]:
        answer = answer_text(sample, self.prompt)
        ids = self.tok.encode(answer, add_special_tokens=False) + [self.eot_id]
        if len(ids) > self.reserve:
            raise TrainConfigError(
                f"sample {sample.id}: its {self.prompt} answer is {len(ids)} tokens with the end of turn, more "
                f"than the {self.reserve} tokens the prompt reserves for its answer (prompts are fitted to "
                "max_seq_length minus that reserve, in training and evaluation alike). An answer format this "
                "long needs a new prompt in automon.prompts.templates with a larger answer_reserve")
        return answer, ids

    def build(self, sample: Sample) -> Example:
        return self.build_many([sample])[0]

    def build_many(self, samples: Sequence[Sample]) -> list[Example]:
        try:
            fitted = fit_prompts(self.tok, samples, self.prompt, shots=self.shots,
                                 enable_thinking=self.enable_thinking, max_seq_length=self.max_seq_length,
                                 with_ids=True, limit_name="train.max_seq_length")
        except PromptFitError as e:
            raise TrainConfigError(str(e)) from None
        out = []
        for s, f in zip(samples, fitted):
            answer, comp = self.answer_ids(s)
            ids: list[int] = f.ids  # type: ignore[assignment]  # with_ids=True
            out.append(Example(sample_id=s.id, subset=s.subset, input_ids=ids + comp,
                               labels=[IGNORE_INDEX] * len(ids) + comp, prompt=f.text, answer=answer,
                               response_tokens_removed=f.response_tokens_removed,
                               request_tokens_removed=f.request_tokens_removed))
        return out

    def iter_chunks(self, samples: Sequence[Sample], stats: ExampleStats, batch: int = 512):
        """Yield lists of Examples, `batch` samples at a time (prompts tokenised in one call per
        batch, so the fast tokenizer uses every core), updating `stats`."""
        for i in range(0, len(samples), batch):
            out = self.build_many(samples[i:i + batch])
            for ex in out:
                stats.n += 1
                stats.lengths.append(len(ex.input_ids))
                stats.by_subset[ex.subset] = stats.by_subset.get(ex.subset, 0) + 1
                if ex.response_tokens_removed or ex.request_tokens_removed:
                    stats.responses_shortened += 1
                    stats.tokens_removed += ex.response_tokens_removed + ex.request_tokens_removed
                if ex.request_tokens_removed:
                    stats.requests_shortened += 1
            yield out

    def build_all(self, samples: Sequence[Sample], batch: int = 512) -> tuple[list[Example], ExampleStats]:
        """All examples as Python objects (tests, small data; `build_dataset` for training)."""
        stats = ExampleStats()
        out = [ex for chunk in self.iter_chunks(samples, stats, batch) for ex in chunk]
        return out, stats

    def build_dataset(self, samples: Sequence[Sample], batch: int = 512, decode_first: int = 16):
        """(datasets.Dataset with input_ids / labels / length, ExampleStats, first Example).

        Chunks go straight into int32 Arrow columns and are verified as they are made, so 150k
        samples of a few thousand tokens need a few GB, not Python lists of every token."""
        import pyarrow as pa
        from datasets import Dataset
        from datasets.table import InMemoryTable

        stats = ExampleStats()
        tables, first = [], None
        ints = pa.list_(pa.int32())
        for chunk in self.iter_chunks(samples, stats, batch):
            verify_examples(self.tok, chunk, self.eot, decode_first=decode_first if first is None else 0)
            first = first or chunk[0]
            tables.append(pa.table({"input_ids": pa.array([e.input_ids for e in chunk], type=ints),
                                    "labels": pa.array([e.labels for e in chunk], type=ints),
                                    "length": pa.array([len(e.input_ids) for e in chunk], type=pa.int32())}))
        return Dataset(InMemoryTable(pa.concat_tables(tables))), stats, first


def supervised_text(tokenizer: Any, ex: Example) -> str:
    """Decode exactly the tokens that carry loss (labels != -100)."""
    return tokenizer.decode([t for t in ex.labels if t != IGNORE_INDEX], skip_special_tokens=False)


def verify_examples(tokenizer: Any, examples: Sequence[Example], eot: str, decode_first: int = 16) -> None:
    """Rule 5: never trust a loss mask you have not decoded. Structural check on every example,
    decode check on the first `decode_first`; raises on any mismatch."""
    for k, ex in enumerate(examples):
        sup = [i for i, t in enumerate(ex.labels) if t != IGNORE_INDEX]
        if not sup or sup[-1] != len(ex.labels) - 1 or sup != list(range(sup[0], len(ex.labels))):
            raise AssertionError(f"example {ex.sample_id}: supervised tokens are not one span ending the sequence")
        if [ex.input_ids[i] for i in sup] != [ex.labels[i] for i in sup]:
            raise AssertionError(f"example {ex.sample_id}: labels differ from input_ids on the answer span")
        if k < decode_first:
            got = supervised_text(tokenizer, ex)
            if got != ex.answer + eot:
                raise AssertionError(f"example {ex.sample_id}: supervised tokens decode to {got!r}, "
                                     f"expected {ex.answer + eot!r}")
