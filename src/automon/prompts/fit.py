"""Fit monitor prompts to a length limit: the ONE function training and evaluation both call.

Budget rule: the prompt gets `max_seq_length - answer_reserve` tokens (the reserve is part of the
prompt's registry entry), so the supervised answer (training) or the generated one (evaluation) always
fits behind it, and a sample's prompt is the same token for token in both stages. A prompt over budget
gets its RESPONSE shortened in the middle (`shorten_middle`: head and tail kept, a marker between);
only when the request alone leaves the response fewer than MIN_RESPONSE_TOKENS is the request
shortened too, each keeping a share. The template and few-shot turns are never cut, and no sample is
dropped: a limit too small for them is an error that says what to raise.

FIT_VERSION names this algorithm and budget rule. Change either and bump it: it changes the prompts
of long samples, so it is recorded with every adapter and evaluation (run.json, automon_adapter.json,
metrics.json), and evaluation refuses an adapter trained under another one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from automon.prompts.render import _field, get_template, monitor_messages, prompt_text, shorten_middle

FIT_VERSION = "fit_v1"
# Least number of response tokens kept before the request is shortened too.
MIN_RESPONSE_TOKENS = 32
# Shortening re-renders and re-counts; BPE merges at the cut points can shift counts by a token
# or two, so it iterates a few times.
_MAX_ROUNDS = 6


class PromptFitError(ValueError):
    """A prompt cannot be fitted to the length limit; the message says which setting to raise."""


@dataclass
class FittedPrompt:
    messages: list[dict[str, str]]
    text: str                    # prompt_text(messages): exactly what the model reads before its answer
    ids: list[int] | None        # its token ids; None when it was not tokenised (short, with_ids=False)
    response_tokens_removed: int = 0
    request_tokens_removed: int = 0

    @property
    def tokens_removed(self) -> int:
        return self.response_tokens_removed + self.request_tokens_removed


def prompt_budget(prompt: str, max_seq_length: int) -> int:
    """Most prompt tokens allowed under `max_seq_length` for this prompt (the rest is its answer's)."""
    return max_seq_length - get_template(prompt).answer_reserve


def fit_prompts(tokenizer: Any, samples: Sequence[Any], prompt: str, *, shots: Sequence[Any] = (),
                enable_thinking: bool, max_seq_length: int | None, with_ids: bool = False,
                limit_name: str = "max_seq_length") -> list[FittedPrompt]:
    """Render every sample with `prompt` (+ `shots`) and fit it to `max_seq_length` (None: no limit).

    Prompts are tokenised in one batch call (the fast tokenizer uses every core). `with_ids`: return
    the token ids of every prompt (training needs them); otherwise only prompts that may be over
    budget are tokenised. `limit_name` is the config key of the limit, for error messages.
    """
    budget = None if max_seq_length is None else prompt_budget(prompt, max_seq_length)
    if budget is not None and budget <= 0:
        raise PromptFitError(f"{limit_name}={max_seq_length} is too small: the {prompt} prompt reserves "
                             f"{get_template(prompt).answer_reserve} tokens for its answer; raise {limit_name}")
    messages = [monitor_messages(s, prompt, shots) for s in samples]
    texts = [prompt_text(tokenizer, m, enable_thinking) for m in messages]
    # A token is at least one UTF-8 byte, so a text of at most `budget` bytes fits untokenised.
    need = [i for i, t in enumerate(texts) if with_ids or (budget is not None and len(t.encode()) > budget)]
    ids: dict[int, list[int]] = {}
    if need:
        enc = tokenizer([texts[i] for i in need], add_special_tokens=False)["input_ids"]
        ids = {i: list(e) for i, e in zip(need, enc)}
    out = []
    for i, s in enumerate(samples):
        fp = FittedPrompt(messages[i], texts[i], ids.get(i))
        if budget is not None and fp.ids is not None and len(fp.ids) > budget:
            fp = _fit(tokenizer, s, prompt, shots, enable_thinking, budget, len(fp.ids),
                      f"{limit_name}={max_seq_length}")
        out.append(fp)
    return out


def fit_prompt(tokenizer: Any, sample: Any, prompt: str, *, shots: Sequence[Any] = (), enable_thinking: bool,
               max_seq_length: int | None, limit_name: str = "max_seq_length") -> FittedPrompt:
    """One sample's fitted prompt, token ids included (see fit_prompts)."""
    return fit_prompts(tokenizer, [sample], prompt, shots=shots, enable_thinking=enable_thinking,
                       max_seq_length=max_seq_length, with_ids=True, limit_name=limit_name)[0]


def _fit(tokenizer: Any, sample: Any, prompt: str, shots: Sequence[Any], enable_thinking: bool,
         budget: int, n_tokens: int, limit: str) -> FittedPrompt:
    """Shorten the response (and, only if it cannot fit otherwise, the request) in the middle."""
    def n_of(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    request, response = _field(sample, "request"), _field(sample, "response")
    req_len, resp_len = n_of(request), n_of(response)
    fixed = n_tokens - resp_len - req_len  # system prompt, shots and template wording
    if fixed + 2 * MIN_RESPONSE_TOKENS > budget:
        with_shots = f" and its {len(shots)} few-shot examples" if shots else ""
        raise PromptFitError(
            f"{limit} is too small: sample {_field(sample, 'id')} needs {fixed} tokens for the {prompt} "
            f"template{with_shots} alone, before any request or response text, and the prompt reserves "
            f"{get_template(prompt).answer_reserve} tokens for its answer. Raise the limit"
            + (" or use fewer/shorter shots" if shots else ""))
    # First pass: cut the response only, keeping at least MIN_RESPONSE_TOKENS of it.
    resp_budget, req_budget = budget - fixed - req_len, req_len
    if resp_budget < MIN_RESPONSE_TOKENS:
        # The request alone overflows: keep a share of the room for each, request first.
        room = budget - fixed
        resp_budget = max(MIN_RESPONSE_TOKENS, min(resp_len, room // 2))
        req_budget = room - resp_budget
    for _ in range(_MAX_ROUNDS):
        resp, resp_removed = shorten_middle(tokenizer, response, resp_budget)
        req, req_removed = (shorten_middle(tokenizer, request, req_budget) if req_budget < req_len
                            else (request, 0))
        msgs = monitor_messages(sample, prompt, shots, response=resp, request=req)
        text = prompt_text(tokenizer, msgs, enable_thinking)
        ids = tokenizer.encode(text, add_special_tokens=False)
        over = len(ids) - budget
        if over <= 0:
            return FittedPrompt(msgs, text, ids, resp_removed, req_removed)
        # Token counts shift at the cut points; take the overflow (plus one) off the response.
        resp_budget = max(MIN_RESPONSE_TOKENS // 2, resp_budget - over - 1)
        if resp_budget == MIN_RESPONSE_TOKENS // 2:
            req_budget = max(MIN_RESPONSE_TOKENS // 2, req_budget - over - 1)
    raise PromptFitError(f"could not shorten sample {_field(sample, 'id')} to {limit} tokens "
                         f"(prompt budget {budget}) in {_MAX_ROUNDS} rounds")
