"""stress(): what apply records in meta["stress"] is kept beside the stress's own record, every
stressed sample is validated, and a changed label is refused (a stress registered for the test)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support import synthetic_samples
from automon.evaluation.stresses import STRESSES, Stress, register, stress
from automon.schema import SampleError


@pytest.fixture
def throwaway():
    made = []

    def make(apply):
        s = register(Stress(name=f"t{len(made)}", version=3, threat="test", subsets=frozenset({"syco_qa"}),
                            apply=apply))
        made.append(s.name)
        return s.name
    yield make
    for name in made:
        STRESSES.pop(name, None)


def test_the_applied_record_is_kept_beside_the_stress_record(throwaway):
    name = throwaway(lambda x, rng: replace(x, response=x.response + " !", meta={**x.meta, "stress": {"k": 1}}))
    y = stress(synthetic_samples("test", 2), name, seed=9)[0]
    assert y.meta["stress"] == {"k": 1, "name": name, "version": 3, "seed": 9, "of": "test-syco_qa-0"}


def test_a_stressed_sample_that_loses_its_evidence_is_refused(throwaway):
    name = throwaway(lambda x, rng: replace(x, response="rewritten entirely"))
    with pytest.raises(SampleError, match="exact substring"):
        stress(synthetic_samples("test", 2), name)


def test_a_changed_label_is_refused(throwaway):
    name = throwaway(lambda x, rng: replace(x, label=1 - x.label, evidence=[]))
    with pytest.raises(ValueError, match="changed the label"):
        stress(synthetic_samples("test", 2), name)
