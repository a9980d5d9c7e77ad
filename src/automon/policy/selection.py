"""Which template items the policy is asked about: shared by the sycophancy steps
(automon.policy.recipes) and sg_code's (automon.policy.sg_code)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from automon.data.recipes.common import short_hash


def cap_per_source(pairs: list, subset: str, seed: int, cap: int | None, source_of: Callable) -> list:
    """At most `cap` per source, chosen by a seeded hash of the item key (order-independent)."""
    by_src: "OrderedDict[str, list]" = OrderedDict()
    for p in sorted(pairs, key=lambda p: short_hash(seed, subset, "policy", p[0].keys[0], n=16)):
        by_src.setdefault(source_of(p), []).append(p)
    return [p for lst in by_src.values() for p in (lst if cap is None else lst[:cap])]
