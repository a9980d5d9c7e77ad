"""The Sample record: the contract between data build, training and evaluation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from automon.errors import UserError
# SUBSETS: subset -> (category, task) in the canonical report order, with the category and task
# vocabularies; derived from the subset registry, the one place a subset is declared.
from automon.subsets import CATEGORIES, SUBSETS, TASKS  # noqa: F401  (re-exported)

SPLITS = ("train", "test")

# Field order is part of the on-disk format (byte-identical rebuilds).
FIELDS = ("id", "pair_id", "split", "category", "task", "subset", "source", "request", "response",
          "label", "evidence", "meta")


_FIELD_SET = frozenset(FIELDS)


class SampleError(UserError, ValueError):
    """A record that breaks the Sample contract."""


@dataclass
class Sample:
    id: str
    pair_id: str | None
    split: str
    category: str
    task: str
    subset: str
    source: str
    request: str
    response: str
    label: int
    evidence: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> "Sample":
        where = f"sample {self.id!r} ({self.source})"
        if self.subset not in SUBSETS:
            raise SampleError(f"{where}: unknown subset {self.subset!r}; valid: {', '.join(SUBSETS)}")
        if SUBSETS[self.subset] != (self.category, self.task):
            raise SampleError(f"{where}: subset {self.subset} is {SUBSETS[self.subset]}, "
                              f"record says ({self.category}, {self.task})")
        if self.split not in SPLITS:
            raise SampleError(f"{where}: split must be one of {SPLITS}, got {self.split!r}")
        if self.label not in (0, 1) or isinstance(self.label, bool):
            raise SampleError(f"{where}: label must be 0 or 1, got {self.label!r}")
        if not self.request.strip() or not self.response.strip():
            raise SampleError(f"{where}: empty request or response")
        if self.split == "test" and not self.pair_id:
            raise SampleError(f"{where}: every test sample needs a pair_id")
        if self.label == 0 and self.evidence:
            raise SampleError(f"{where}: a benign sample cannot carry evidence")
        for ev in self.evidence:
            if not ev or ev not in self.response:
                raise SampleError(f"{where}: evidence {ev[:60]!r} is not an exact substring of the response")
        return self

    def to_json(self) -> str:
        # The fields themselves, not dataclasses.asdict: that deep-copies every meta dict first and
        # took most of the time of writing a build (the JSON is the same).
        return json.dumps({k: getattr(self, k) for k in FIELDS}, ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sample":
        if d.keys() == _FIELD_SET:  # the common case, checked at C speed (reading a build is 150k of these)
            return cls(**d)
        missing = [k for k in FIELDS if k not in d]
        if missing:
            raise SampleError(f"record {d.get('id')!r} lacks fields {missing}")
        extra = sorted(set(d) - set(FIELDS))
        if extra:
            raise SampleError(f"record {d.get('id')!r} has unknown fields {extra}")
        return cls(**{k: d[k] for k in FIELDS})


def read_samples(path, split: str | None = None) -> list[Sample]:
    """Read a train/test JSONL file written by the data build. Every record is validated (a label
    other than 0/1, an unknown subset, a sample of the other split, ...): a bad one stops the read
    with its file and line, never reaching training or scoring."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                s = Sample.from_dict(json.loads(line)).validate()
                if split is not None and s.split != split:
                    raise SampleError(f"sample {s.id!r} has split {s.split!r} but is in the {split} file")
            except (json.JSONDecodeError, SampleError, TypeError, AttributeError) as e:
                raise SampleError(f"not a valid sample: {e}", f"{path}:{lineno}",
                                  "the file is not as data_build/build.py wrote it: rebuild it") from e
            out.append(s)
    return out
