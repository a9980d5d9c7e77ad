"""automon.data.card: the disjointness paragraph describes the check the build actually ran, for a build
of this version and for one made before disjoint-v3 (annotate renders the card of existing builds)."""

from __future__ import annotations

from automon.data.card import _near_duplicate_method
from automon.data.disjoint import DISJOINT_VERSION, find_conflicts


def test_current_params_describe_the_exact_confirmation():
    params = find_conflicts([], []).params
    text = _near_duplicate_method(params)
    assert params["version"] == DISJOINT_VERSION
    assert "computed exactly" in text and params["lsh_bands"] in text and str(params["lsh_max_miss_at_threshold"]) in text


def test_params_from_before_v3_describe_the_estimate():
    params = {"version": "disjoint-v2", "ngram": 5, "num_perm": 128, "threshold": 0.8}
    text = _near_duplicate_method(params)
    assert "estimated Jaccard >= 0.8" in text and "disjoint-v2" in text and "exactly" not in text
