"""What synthetic source rows are made of: a word bank and small real Python tasks.

Texts are drawn from the word bank so that different items are NOT near-duplicates of each other
(the build's MinHash check would otherwise, correctly, drop them); code tasks are real, runnable
Python whose expected outputs are computed by running them. Used by each SourceSpec's `synthetic`
generator (automon.sources.registry); automon.sources.synthetic writes the rows.
"""

from __future__ import annotations

import random

WORDS = (
    "river market lantern copper orchard signal harbor meadow pilot quarry saddle timber violet "
    "window anchor basket candle dragon ember falcon garden hammer island jacket kettle ladder "
    "marble needle oyster pepper quiver rocket silver tunnel umbrella valley walnut yellow zebra "
    "across beyond during toward within around between beneath quickly slowly gently boldly "
    "bright quiet heavy narrow golden frozen hidden ancient modern rural urban coastal northern "
    "southern eastern western central distant nearby famous humble clever patient careful brave "
    "farmer teacher doctor sailor painter baker miner tailor writer singer driver builder "
    "measures collects repairs paints carries counts studies plants guards visits sells trades "
    "apples stones letters coins bricks shells feathers ribbons marbles tickets pencils buttons "
    "village station library factory bridge castle temple school hospital museum theatre tower"
).split()


def sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize()


def question(rng: random.Random) -> str:
    return f"{sentence(rng, rng.randint(14, 22))}?"


# Small real Python tasks: (name, args, body, inputs); expected outputs are computed by running them.
_CODE_TASKS = [
    ("scale_add", "x", "return x * {a} + {b}", [(1,), (2,), (5,), (-3,), (10,)]),
    ("count_over", "xs", "return sum(1 for v in xs if v > {a})", [([1, 5, 9],), ([],), ([10, 20, 3],), ([4, 4, 4],), ([2, 7, 8, 1],)]),
    ("repeat_word", "s", "return (s + ' ') * {a}", [("ab",), ("x",), ("",), ("hello",), ("q",)]),
    ("clip", "x", "return max({b}, min(x, {a} + {b}))", [(0,), (100,), (-5,), (7,), (3,)]),
    ("last_digits", "n", "return abs(n) % (10 ** {a})", [(12345,), (7,), (-987,), (0,), (1000001,)]),
    ("pair_sum", "a, b", "return a * {a} - b + {b}", [(1, 2), (0, 0), (5, -1), (3, 3), (-2, 7)]),
]


def code_tasks(rng: random.Random, n: int) -> list[dict]:
    """n small tasks: fname, args, code, calls [(args text, expected)], doc."""
    tasks = []
    for i in range(n):
        name, args, body, inputs = _CODE_TASKS[i % len(_CODE_TASKS)]
        a, b = rng.randint(2, 9), rng.randint(1, 9)
        fname = f"{name}_{i}"
        code = f"def {fname}({args}):\n    {body.format(a=a, b=b)}\n"
        ns: dict = {}
        exec(code, ns)  # our own generated code: computes the expected outputs of the tests
        calls = [(", ".join(repr(v) for v in inp), ns[fname](*inp)) for inp in inputs]
        tasks.append({"fname": fname, "args": args, "code": code, "calls": calls,
                      "doc": sentence(rng, 12) + "."})
    return tasks
