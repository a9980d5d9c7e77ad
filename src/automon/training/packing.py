"""Padding-free packing: training examples concatenated into micro-batches of up to a token budget.

Corpus examples are short (a few hundred tokens) next to the 32k-token window a GPU step is sized
for; batching them two at a time leaves the GPU mostly idle. A pack is one row of whole examples
laid end to end (`train.tokens_per_step` tokens at most), trained as one micro-batch:

- `position_ids` restart at 0 for every example, so each example sees exactly the positions (and
  rotary phases) it would see alone;
- no attention across examples: transformers builds a block-diagonal causal mask from the restarting
  position ids when there is no attention mask and no cache (sdpa / eager; flash attention takes the
  same position ids as variable-length sequences), and Unsloth reads `packed_seq_lengths`;
- the loss is unchanged: labels are the examples' own labels (-100 on every prompt token), and the
  first token of every example is a prompt token, so no position predicts across a boundary;
- no padding: a micro-batch is one pack, so every computed token is an example's token.

Packs are planned once per run by best-fit decreasing over the example lengths (shuffled by seed first,
so ties and the packs' make-up depend on the seed); an example longer than the budget gets a pack of its
own (it is never cut). The trainer then visits the packs in an order drawn from (seed, epoch), so a run
is reproducible from its seed and a resumed run continues with the same next pack, hence the same next
example. PACKING_VERSION names this algorithm: change the plan and bump it (it is recorded in run.json
and the adapter's metadata, and is part of the training identity through train.packing).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Sequence

PACKING_VERSION = "bfd_v1"
IGNORE_INDEX = -100


def plan_packs(lengths: Sequence[int], budget: int, seed: int) -> list[list[int]]:
    """Example indices per pack, best-fit decreasing: every example goes into the fullest pack that still
    has room for it (a new pack when none has). Deterministic for (lengths, budget, seed)."""
    import numpy as np

    if budget < 1:
        raise ValueError(f"pack budget must be >= 1 token, got {budget}")
    n = len(lengths)
    order = np.random.default_rng(seed).permutation(n)
    lens = np.asarray(lengths, dtype=np.int64)
    order = order[np.argsort(-lens[order], kind="stable")]   # longest first; ties in seeded order
    packs: list[list[int]] = []
    # Open packs by remaining room, ascending: (room, pack number). Bisecting for the first room >= length
    # finds the best fit; a pack with no room left for the shortest example is closed.
    rooms: list[tuple[int, int]] = []
    shortest = int(lens.min()) if n else 0
    for i in order.tolist():
        length = int(lens[i])
        k = bisect.bisect_left(rooms, (length, -1))
        if k < len(rooms):
            room, p = rooms.pop(k)
            packs[p].append(i)
            room -= length
        else:
            packs.append([i])
            p, room = len(packs) - 1, budget - length
        if room >= shortest:
            bisect.insort(rooms, (room, p))
    return packs


@dataclass
class PackStats:
    """What packing did to a corpus (for the log, run.json and bench/bench_train.py)."""
    examples: int
    packs: int
    budget: int
    useful_tokens: int       # the examples' tokens
    computed_tokens: int     # tokens the model runs on (no padding: equal to useful_tokens)
    capacity_tokens: int     # sum over packs of max(budget, pack tokens)
    longest_pack: int
    over_budget: int         # examples longer than the budget, each in a pack of its own

    @property
    def fill(self) -> float:
        """Share of the packs' budgets that holds tokens (a pack over budget counts as full)."""
        return self.useful_tokens / self.capacity_tokens if self.capacity_tokens else 0.0

    def summary(self) -> dict:
        return {"packing": PACKING_VERSION, "tokens_per_step": self.budget, "examples": self.examples,
                "packs": self.packs, "useful_tokens": self.useful_tokens, "computed_tokens": self.computed_tokens,
                "pack_fill": round(self.fill, 4), "examples_per_pack": round(self.examples / max(self.packs, 1), 2),
                "longest_pack": self.longest_pack, "examples_over_budget": self.over_budget}


def pack_stats(lengths: Sequence[int], packs: Sequence[Sequence[int]], budget: int) -> PackStats:
    sizes = [sum(lengths[i] for i in p) for p in packs]
    return PackStats(examples=len(lengths), packs=len(packs), budget=budget, useful_tokens=int(sum(lengths)),
                     computed_tokens=int(sum(sizes)), capacity_tokens=int(sum(max(budget, x) for x in sizes)),
                     longest_pack=max(sizes, default=0),
                     over_budget=sum(1 for x in lengths if x > budget))


def pack_dataset(dataset: Any, budget: int, seed: int):
    """(datasets.Dataset of packs, PackStats) from a dataset of examples (input_ids, labels, length).

    Pack rows: `input_ids` and `labels` (the examples' own, end to end), `seq_lengths` (each example's
    length, in order), `length` (the pack's tokens) and `example_index` (the examples' rows in `dataset`).
    Built with Arrow takes and offsets: no Python list per token."""
    import numpy as np
    import pyarrow as pa
    from datasets import Dataset
    from datasets.table import InMemoryTable

    lengths = [int(x) for x in dataset["length"]]
    packs = plan_packs(lengths, budget, seed)
    order = np.fromiter((i for p in packs for i in p), dtype=np.int64, count=len(lengths))
    taken = _table(dataset).select(["input_ids", "labels"]).take(pa.array(order))
    per_pack = np.array([len(p) for p in packs], dtype=np.int64)
    ex_offsets = np.concatenate([[0], np.cumsum(per_pack)])              # pack -> first example in `order`
    lens = np.asarray(lengths, dtype=np.int64)[order]
    tok_offsets = np.concatenate([[0], np.cumsum(lens)])[ex_offsets]      # pack -> first token

    def tokens(col: str) -> pa.Array:
        flat = pa.concat_arrays([c.flatten() for c in taken.column(col).chunks]).cast(pa.int32())
        return pa.ListArray.from_arrays(pa.array(tok_offsets, type=pa.int32()), flat)

    def per_example(values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(ex_offsets, type=pa.int32()), pa.array(values, type=pa.int32()))

    out = pa.table({"input_ids": tokens("input_ids"), "labels": tokens("labels"),
                    "seq_lengths": per_example(lens), "length": pa.array(np.diff(tok_offsets), type=pa.int32()),
                    "example_index": per_example(order)})
    return Dataset(InMemoryTable(out)), pack_stats(lengths, packs, budget)


def position_ids(seq_lengths: Sequence[int]) -> list[int]:
    """0..n-1 for every example of a pack, end to end."""
    return [p for n in seq_lengths for p in range(int(n))]


class PackCollator:
    """One pack per micro-batch -> input_ids / labels / position_ids of shape (1, pack length), no
    attention mask (its absence is what makes transformers derive the per-example mask from the position
    ids). `packed_seq_lengths` (int32) is added for Unsloth, whose attention reads it."""

    def __init__(self, with_seq_lengths: bool = False) -> None:
        self.with_seq_lengths = with_seq_lengths

    def __call__(self, features: list[dict]) -> dict:
        import torch

        if len(features) != 1:
            raise ValueError(f"a packed micro-batch is one pack, got {len(features)} (per_device_train_batch_size "
                             "must be 1 with packing)")
        f = features[0]
        seq = [int(x) for x in f["seq_lengths"]]
        if sum(seq) != len(f["input_ids"]):
            raise ValueError(f"pack of {len(f['input_ids'])} tokens but seq_lengths sum to {sum(seq)}")
        batch = {"input_ids": torch.tensor([f["input_ids"]], dtype=torch.long),
                 "labels": torch.tensor([f["labels"]], dtype=torch.long),
                 "position_ids": torch.tensor([position_ids(seq)], dtype=torch.long)}
        if self.with_seq_lengths:
            batch["packed_seq_lengths"] = torch.tensor(seq, dtype=torch.int32)
        return batch


def split_pack(row: dict) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) of every example in a pack row, in order."""
    out, start = [], 0
    for n in row["seq_lengths"]:
        out.append((list(row["input_ids"][start:start + n]), list(row["labels"][start:start + n])))
        start += n
    return out


def _flat(column: Any):
    """The values of an Arrow list column (ChunkedArray of lists) as one numpy array."""
    import numpy as np
    import pyarrow as pa

    chunks = [c.flatten() for c in column.chunks]
    return (pa.concat_arrays(chunks).to_numpy(zero_copy_only=False) if chunks else np.zeros(0, dtype=np.int64))


def _table(ds: Any):
    return ds.data.table if hasattr(ds.data, "table") else ds.data


def verify_packs(tokenizer: Any, packs: Any, examples: Any, eot: str, answers: Sequence[str] | None = None,
                 decode_first: int = 16) -> None:
    """Rule 5 on the rows the model actually sees. Every example is in exactly one pack; every pack is its
    examples' tokens and labels end to end (compared token by token with the checked examples), and its
    seq_lengths are their lengths. Then the first `decode_first` examples are cut out of their pack rows by
    seq_lengths and their supervised tokens decoded: one span after the prompt, ending the example with the
    end-of-turn token, and equal to `answers[i]` + end of turn (i = the example's row) when given."""
    import numpy as np

    pt, et = _table(packs), _table(examples)
    order = _flat(pt.column("example_index")).astype(np.int64)
    if not np.array_equal(np.sort(order), np.arange(et.num_rows)):
        raise AssertionError("packs do not hold every training example exactly once")
    lens = np.asarray(et.column("length").to_numpy(), dtype=np.int64)
    if not np.array_equal(_flat(pt.column("seq_lengths")).astype(np.int64), lens[order]):
        raise AssertionError("a pack's seq_lengths differ from its examples' lengths")
    import pyarrow as pa

    taken = et.select(["input_ids", "labels"]).take(pa.array(order))
    for col in ("input_ids", "labels"):
        if not np.array_equal(_flat(pt.column(col)), _flat(taken.column(col))):
            raise AssertionError(f"packed {col} are not the examples' {col} end to end")
    checked = 0
    for row in packs:
        if checked >= decode_first:
            break
        for (ids, labels), i in zip(split_pack(row), row["example_index"]):
            if checked >= decode_first:
                break
            sup = [k for k, t in enumerate(labels) if t != IGNORE_INDEX]
            if not sup or sup != list(range(sup[0], len(labels))) or sup[0] == 0:
                raise AssertionError(f"packed example {i}: its supervised tokens are not one span ending it "
                                     "after a prompt")
            got = tokenizer.decode([labels[k] for k in sup], skip_special_tokens=False)
            want = answers[int(i)] + eot if answers is not None else None
            if not got.endswith(eot) or (want is not None and got != want):
                raise AssertionError(f"packed example {i}: its supervised tokens decode to {got!r}, expected "
                                     f"{want if want is not None else 'an answer ending ' + eot!r}")
            checked += 1
