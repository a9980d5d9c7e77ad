"""Few-shot examples: k label-balanced examples from the TRAINING split, chosen by seed.

The same shots precede every test prompt (a shared prefix that vLLM's prefix cache reuses). They are
drawn from `build.samples("train")` only, and any candidate whose id or pair_id also occurs in the
test split is refused, so no test sample can appear inside a prompt.
"""

from __future__ import annotations

import random
from typing import Iterable

from automon.evaluation.errors import EvalError
from automon.schema import Sample


def select_shots(train: Iterable[Sample], k: int, seed: int = 0, max_chars: int = 3000,
                 test: Iterable[Sample] = ()) -> list[Sample]:
    if k <= 0:
        return []
    test = list(test)
    test_ids = {s.id for s in test} | {s.pair_id for s in test if s.pair_id}
    cands = [s for s in train
             if s.split == "train" and s.id not in test_ids and (s.pair_id is None or s.pair_id not in test_ids)
             and len(s.request) + len(s.response) <= max_chars]
    rng = random.Random(seed)
    by_label = {lab: sorted((s for s in cands if s.label == lab), key=lambda s: s.id) for lab in (0, 1)}
    n_pos = k // 2 + (k % 2 if rng.random() < 0.5 else 0)
    want = {1: n_pos, 0: k - n_pos}
    for lab, n in want.items():
        if len(by_label[lab]) < n:
            raise EvalError(f"shots={k} needs {n} training examples with label {lab} of at most "
                            f"shots_max_chars={max_chars} characters; found {len(by_label[lab])}. "
                            "Raise shots_max_chars or lower shots.")
    picked: list[Sample] = []
    for lab in (1, 0):
        pool = by_label[lab][:]
        rng.shuffle(pool)
        used_subsets: set[str] = {s.subset for s in picked}
        chosen: list[Sample] = []
        # prefer subsets not yet represented, so the shots cover several kinds of misbehavior
        for s in pool:
            if len(chosen) == want[lab]:
                break
            if s.subset not in used_subsets:
                chosen.append(s)
                used_subsets.add(s.subset)
        for s in pool:
            if len(chosen) == want[lab]:
                break
            if s not in chosen:
                chosen.append(s)
        picked.extend(chosen)
    rng.shuffle(picked)
    leaked = [s.id for s in picked if s.id in test_ids or s.split != "train"]
    if leaked:  # unreachable by construction; kept as the last line of defence
        raise EvalError(f"few-shot selection picked test samples {leaked}")
    return picked
