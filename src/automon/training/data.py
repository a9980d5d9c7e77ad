"""Training examples: the shared renderer's prompt + the supervised answer, tokenised, labels masked.

Every example is `input_ids = prompt_ids + answer_ids + [end_of_turn]` with `labels = -100` on the
prompt, so the loss is on the answer and the end-of-turn token only. The prompt text is exactly
what evaluation renders: `prompt_text(tok, monitor_messages(sample, version), enable_thinking)`.
Samples longer than `max_seq_length` get their RESPONSE shortened in the middle (head and tail
kept, `SHORTEN_MARKER` in between) before rendering; the answer is never cut and no sample is
dropped (TRL would otherwise cut the answer and then silently drop the example, apis.md s2c).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from automon.prompts import answer_text, monitor_messages, prompt_text, shorten_middle
from automon.schema import SUBSETS, Sample
from automon.training.errors import TrainConfigError

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
_SENTINEL = "@@AUTOMON_ANSWER_SENTINEL@@"
# Least number of response tokens kept before the request is shortened too.
MIN_RESPONSE_TOKENS = 32
# Shortening re-renders and re-counts; BPE merges at the cut points can shift counts by a token
# or two, so it iterates a few times.
_MAX_SHORTEN_ROUNDS = 6


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
    prompt: str            # the exact prompt text (what evaluation renders for the same response)
    answer: str            # answer_text(sample, version), without the end-of-turn token
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
    """Renders and tokenises samples for one tokenizer / prompt version / length budget."""

    def __init__(self, tokenizer: Any, prompt_version: str, enable_thinking: bool, max_seq_length: int):
        self.tok = tokenizer
        self.version = prompt_version
        self.enable_thinking = enable_thinking
        self.max_seq_length = max_seq_length
        self.eot = end_of_turn_token(tokenizer)
        self.eot_id = tokenizer.convert_tokens_to_ids(self.eot)

    def _encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def render(self, sample: Sample, response: str | None = None, request: str | None = None) -> str:
        s = sample if request is None else _with(sample, request=request)
        return prompt_text(self.tok, monitor_messages(s, self.version, response=response),
                           enable_thinking=self.enable_thinking)

    def answer_ids(self, sample: Sample) -> tuple[str, list[int]]:
        answer = answer_text(sample, self.version)
        return answer, self._encode(answer) + [self.eot_id]

    def build(self, sample: Sample, prompt_ids: list[int] | None = None, prompt: str | None = None) -> Example:
        answer, comp = self.answer_ids(sample)
        if prompt is None:
            prompt = self.render(sample)
        if prompt_ids is None:
            prompt_ids = self._encode(prompt)
        removed_resp = removed_req = 0
        if len(prompt_ids) + len(comp) > self.max_seq_length:
            prompt, prompt_ids, removed_resp, removed_req = self._shorten(sample, len(prompt_ids), len(comp))
        return Example(sample_id=sample.id, subset=sample.subset, input_ids=prompt_ids + comp,
                       labels=[IGNORE_INDEX] * len(prompt_ids) + comp, prompt=prompt, answer=answer,
                       response_tokens_removed=removed_resp, request_tokens_removed=removed_req)

    def _shorten(self, sample: Sample, prompt_len: int, comp_len: int) -> tuple[str, list[int], int, int]:
        """Shorten the response (and, only if it cannot fit otherwise, the request) in the middle."""
        limit = self.max_seq_length
        resp_len = len(self._encode(sample.response))
        req_len = len(self._encode(sample.request))
        fixed = prompt_len - resp_len - req_len  # system prompt, template and question wording
        if fixed + comp_len + 2 * MIN_RESPONSE_TOKENS > limit:
            raise TrainConfigError(
                f"train.max_seq_length={limit} is too small: sample {sample.id} needs {fixed + comp_len} tokens "
                f"for the prompt template and answer alone, before any request or response text")
        # First pass: cut the response only, keeping at least MIN_RESPONSE_TOKENS of it.
        resp_budget = limit - comp_len - fixed - req_len
        req_budget = req_len
        if resp_budget < MIN_RESPONSE_TOKENS:
            # The request alone overflows: keep a share of the room for each, request first.
            room = limit - comp_len - fixed
            resp_budget = max(MIN_RESPONSE_TOKENS, min(resp_len, room // 2))
            req_budget = room - resp_budget
        for _ in range(_MAX_SHORTEN_ROUNDS):
            resp, removed_resp = shorten_middle(self.tok, sample.response, resp_budget)
            req, removed_req = (shorten_middle(self.tok, sample.request, req_budget)
                                if req_budget < req_len else (sample.request, 0))
            prompt = self.render(sample, response=resp, request=req if removed_req else None)
            ids = self._encode(prompt)
            over = len(ids) + comp_len - limit
            if over <= 0:
                return prompt, ids, removed_resp, removed_req
            # Token counts shift at the cut points; take the overflow (plus one) off the response.
            resp_budget = max(MIN_RESPONSE_TOKENS // 2, resp_budget - over - 1)
            if resp_budget == MIN_RESPONSE_TOKENS // 2:
                req_budget = max(MIN_RESPONSE_TOKENS // 2, req_budget - over - 1)
        raise TrainConfigError(f"could not shorten sample {sample.id} to train.max_seq_length={limit} tokens")

    def iter_chunks(self, samples: Sequence[Sample], stats: ExampleStats, batch: int = 512):
        """Yield lists of Examples, `batch` samples at a time (prompts tokenised in one call per
        batch, so the fast tokenizer uses every core), updating `stats`."""
        for i in range(0, len(samples), batch):
            chunk = samples[i:i + batch]
            prompts = [self.render(s) for s in chunk]
            enc = self.tok(prompts, add_special_tokens=False)["input_ids"]
            out = []
            for s, p, ids in zip(chunk, prompts, enc):
                ex = self.build(s, prompt_ids=list(ids), prompt=p)
                out.append(ex)
                stats.n += 1
                stats.lengths.append(len(ex.input_ids))
                stats.by_subset[s.subset] = stats.by_subset.get(s.subset, 0) + 1
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


def _with(sample: Sample, **changes) -> Sample:
    import dataclasses

    return dataclasses.replace(sample, **changes)


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
