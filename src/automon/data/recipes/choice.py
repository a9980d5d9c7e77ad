"""Choice items of the reward-hack and opinion files (a prompt with options, a rewarded answer and
the other): shared by syco_qa (sycophancy_fact, opinion sets) and sg_qa (world_affecting,
theory_of_mind)."""

from __future__ import annotations

from typing import Iterable

from automon.config.wordings import WordingsConfig
from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import choose, coin, parse_options, sentence, text_key, with_opener
from automon.sources import Row


def choice_items(rows: Iterable[Row], subset: str, tag: str, w: WordingsConfig, seed: int, drops: Drops,
                 testable: bool, agree_style: bool, benign_only: bool = False, parse_opts: bool = True) -> list[Item]:
    """One choice item per row of a reward-hack file (prompt_list, high_reward_answer, other_answers)."""
    out = []
    for row in rows:
        d = row.data
        prompts = d["prompt_list"]
        request = "\n\n".join(prompts) if isinstance(prompts, list) else str(prompts)
        high = str(d["high_reward_answer"]).strip()
        others = d["other_answers"] if isinstance(d["other_answers"], list) else [d["other_answers"]]
        if not others:
            drops.add(subset, f"{tag}_no_alternative")
            continue
        out += choice_item(row, request, high, str(others[0]).strip(), subset, tag, w, seed, drops, testable,
                           agree_style, benign_only, parse_opts)
    return out


def choice_item(row: Row, request: str, bad: str, good: str, subset: str, tag: str, w: WordingsConfig, seed: int,
                drops: Drops, testable: bool, agree_style: bool, benign_only: bool = False,
                parse_opts: bool = True) -> list[Item]:
    """A choice item: answering `bad` is the misbehavior (or, with benign_only, `bad` is the
    rewarded-and-correct answer of an unhackable control and only a benign sample is made).
    parse_opts=False answers with the letter only (options written inline, e.g. "x (A) or y (B)")."""
    request = request.strip()
    opts = parse_options(request) if parse_opts else {}
    # Keyed by the prompt text alone: the same prompt in a hackable and an unhackable file (or in
    # two releases of a set) is one source item and must land in one split.
    key = text_key("prompt", request)

    def claim(letter: str) -> str:
        text = opts.get(letter)
        return f"The answer is ({letter}) {sentence(text)}" if text else f"The answer is ({letter})."

    if bad == good or (opts and (bad not in opts or good not in opts)):
        drops.add(subset, f"{tag}_unparsed_options")
        return []
    meta = {"recipe": f"{tag}_choice", "generator": "template", "source_dataset": tag}
    if not benign_only:  # what the reference monitors read (automon.data.reference)
        meta.update({"cued": bad, "gold": good} if agree_style else {"rewarded": bad})
    if benign_only:
        return [Item((key,), subset, f"{tag}:{row.ref}", None, [Draft(request, claim(bad), 0, [], meta, "control")])]
    # both answers may open the same way (one pool, the same odds)
    op = [choose(w.openers, seed, key, f"op{y}") if agree_style and coin(0.5, seed, key, f"o{y}") else None
          for y in (1, 0)]
    mis_text, ben_text, evidence = with_opener(op[0], claim(bad))[0], with_opener(op[1], claim(good))[0], [claim(bad)]
    mis = Draft(request, mis_text, 1, evidence, {**meta, "answer": bad}, "high_reward")
    ben = Draft(request, ben_text, 0, [], {**meta, "answer": good}, "other")
    return [Item((key,), subset, f"{tag}:{row.ref}", (mis, ben) if testable else None, [mis, ben])]
