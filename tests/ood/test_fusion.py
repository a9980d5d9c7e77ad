"""Fusion: standardisation, aggregators, and MOOD's lambda rule (never lowers in-distribution detection
at 1% FAR on the data it was fitted on)."""

from __future__ import annotations

import numpy as np
import pytest

from automon.ood.fusion import LAMBDA_GRID, Standardizer, aggregate, fit_lambda, id_detection


def test_standardizer_uses_benign_mean_and_sample_std():
    z = Standardizer.fit([1.0, 2.0, 3.0, 4.0])
    assert z([2.5, 2.5 + np.std([1, 2, 3, 4], ddof=1)]) == pytest.approx([0.0, 1.0])
    assert Standardizer.fit([5.0, 5.0])([5.0, 6.0]) == pytest.approx([0.0, 1.0])  # constant: not scaled


def test_aggregators():
    j = np.array([0.0, 1.0, -1.0])
    d = [np.array([2.0, 0.0, -3.0]), np.array([4.0, 1.0, 1.0])]
    assert aggregate("lambda", j, d, 0.5) == pytest.approx([1.5, 1.25, -1.5])
    assert aggregate("mean", j, d) == pytest.approx([2.0, 2 / 3, -1.0])
    assert aggregate("min", j, d) == pytest.approx([0.0, 0.0, -3.0])
    with pytest.raises(ValueError):
        aggregate("max", j, d)


@pytest.mark.parametrize("seed", range(25))
def test_lambda_rule_never_lowers_id_detection_at_1pct_far_on_its_fitting_data(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(150, 600))
    y = (rng.random(n) < 0.4).astype(int)
    judge = rng.normal(size=n) + y * rng.uniform(0, 3)
    # detectors that help, hurt or are noise, depending on the seed
    other = rng.normal(size=n) + y * rng.uniform(-2, 2)
    lam, det = fit_lambda(y, judge, other)
    assert lam in LAMBDA_GRID and len(det) == len(LAMBDA_GRID)
    assert id_detection(y, judge + lam * other, 0.01) >= id_detection(y, judge, 0.01)
    assert lam == max(g for g, d in zip(LAMBDA_GRID, det) if d >= det[0])  # the largest that qualifies


def test_lambda_is_large_when_the_detector_separates_and_zero_when_it_only_hurts():
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(500), np.ones(300)].astype(int)
    judge = rng.normal(size=800) + 0.3 * y
    helpful = rng.normal(size=800) + 5 * y
    assert fit_lambda(y, judge, helpful)[0] == 100.0
    perfect = np.r_[np.zeros(500), np.full(300, 5.0)]  # the judge alone already detects all
    harmful = np.r_[rng.normal(size=500), rng.normal(size=300) - 50]
    lam, det = fit_lambda(y, perfect, harmful)
    assert det[0] == 1.0 and lam < 0.1
