"""A report's caveats: each appears exactly when its condition holds."""

from types import SimpleNamespace

from support import synthetic_samples
from automon.evaluation.caveats import SMALL_SAMPLE_PAIRS, caveats


def _test(pairs: int):
    return synthetic_samples("test", 2 * pairs)


def test_real_model_real_data_enough_pairs_has_no_caveat():
    real = SimpleNamespace(pretrained="smollm2_135m_instruct")
    assert caveats(real, {}, _test(SMALL_SAMPLE_PAIRS), None) == []
    assert caveats(SimpleNamespace(pretrained="Qwen/Qwen3-4B"), {}, _test(SMALL_SAMPLE_PAIRS), None) == []


def test_each_condition_adds_its_caveat():
    real, tiny = SimpleNamespace(pretrained="smollm2_135m_instruct"), SimpleNamespace(pretrained="tiny")
    enough = _test(SMALL_SAMPLE_PAIRS)
    assert ["random weights" in n for n in caveats(tiny, {}, enough, None)] == [True]
    assert ["synthetic" in n for n in caveats(real, {"synthetic_sources": "x"}, enough, None)] == [True]
    small = caveats(real, {}, _test(SMALL_SAMPLE_PAIRS - 1), None)
    assert len(small) == 1 and f"{SMALL_SAMPLE_PAIRS - 1} twin pairs" in small[0]
    assert ["at most 5 pairs" in n for n in caveats(real, {}, enough, 5)] == [True]
