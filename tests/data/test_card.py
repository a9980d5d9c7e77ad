"""automon.data.card: the disjointness paragraph describes the check the build actually ran, for a build
of this version and for one made before disjoint-v3 (annotate renders the card of existing builds)."""

from __future__ import annotations

import json

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


def test_a_build_without_sandbox_isolation_says_so_in_capitals(tmp_path):
    """The mode sg_code's code ran under is in the build record (build_log.json), not in the manifest
    or the samples; a build whose code ran with sandbox.isolation=none opens its card with a warning in
    capitals. A manifest written before the record (build-v1) counted the modes itself."""
    from support import build_cfg
    from automon.data.card import dataset_card
    from automon.data.build import run_build
    from automon.sources.synthetic import write_synthetic_root

    root = write_synthetic_root(tmp_path / "raw", n=40)
    run_build(build_cfg([f"sources.root={root}", f"out={tmp_path / 'b'}", "subsets=[sg_code]", "test.sg_code=4"]))
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    record = json.loads((tmp_path / "b" / "build_log.json").read_text())["build"]
    assert "sandbox_isolation" not in manifest and "code_version" not in manifest
    modes = record["sandbox_isolation_samples"]
    assert set(modes) <= {"bwrap", "unshare"} and sum(modes.values()) > 4
    assert record["sandbox_isolation"] == {"sg_code": next(iter(modes))}
    assert "ISOLATION WAS OFF" not in (tmp_path / "b" / "README.md").read_text()
    assert "released before `build-v2`" not in (tmp_path / "b" / "README.md").read_text()  # no old-build note
    for card in (dataset_card(manifest, dict(record, sandbox_isolation_samples={"none": 12})),
                 dataset_card(dict(manifest, sandbox_isolation={"none": 12}, code_version="abc"))):
        assert "SANDBOX ISOLATION WAS OFF (sandbox.isolation=none): the code behind 12 samples" in card
        assert card.index("ISOLATION WAS OFF") < card.index("## Counts")
