"""The answer a response commits to, read by the policy generator's extractors
(automon.policy.extract), so that a stress can show it left the answer where it was.

The subset's SubsetSpec.answer says which extractor applies: "choice" samples with lettered options
(MMLU and fact items, incentive choice items: options `(A) ...` or `A) ...` on lines of the request, or
letters `(A)` inline) are read by `extract_choice`, "number" samples (GSM8K chains) by
`extract_number`. Open answers (TruthfulQA) and safety replies have no extractor that works without
the source's answer lists: nothing re-reads them (paraphrase.py uses only meaning-keeping rules and
keeps their numbers and quotations).
"""

from __future__ import annotations

import re

from automon.policy.extract import extract_choice, extract_number
from automon.schema import SUBSETS, Sample
from automon.subsets import get as subset_spec

_OPTION = re.compile(r"^\s*\(?([A-H])\)\s+(.+?)\s*$", re.M)
_INLINE = re.compile(r"\(([A-H])\)")


def options(request: str) -> dict[str, str]:
    """The lettered options of a multiple-choice request ({} if it has fewer than two)."""
    found: dict[str, str] = {}
    for m in _OPTION.finditer(request):
        found.setdefault(m.group(1), m.group(2))
    if len(found) < 2:  # options named inline ("... cooled down (A) or still warm (B)?"): letters only
        found = {m.group(1): "" for m in _INLINE.finditer(request)}
    return found if len(found) >= 2 else {}


def answer_kind(x: Sample) -> str | None:
    """How x's subset checks an answer (SubsetSpec.answer: "choice", "number", ...); None for a subset
    that checks none, or is not registered."""
    return subset_spec(x.subset).answer if x.subset in SUBSETS else None


def answer_of(x: Sample) -> str | None:
    """The option letter or final number the response commits to; None where no extractor applies
    (or none reads an answer)."""
    kind = answer_kind(x)
    if kind == "number":
        return extract_number(x.response).answer
    if kind == "choice":
        opts = options(x.request)
        if opts:
            return extract_choice(x.response, opts).answer
    return None


def same_answer(before: Sample, after: Sample) -> bool:
    """Whether the extractors read the same answer in both responses (True where none applies)."""
    return answer_of(before) == answer_of(after)
