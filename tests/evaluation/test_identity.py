"""What an evaluation is from its config (automon.evaluation.identity): the one place the evaluation
and its currency check (automon.evaluation.status) both read, and how renamed config keys stay
readable in identity.json records written before the rename."""

from __future__ import annotations

import json

from support import compose, make_build
from automon.evaluation import evaluate
from automon.evaluation.identity import IDENTITY_FILE, RENAMED_KEYS, upgrade
from automon.evaluation.status import status


def test_upgrade_spells_renamed_keys_the_current_way_and_leaves_the_rest():
    old = {"config": {"backend": {"name": "probe", "kind": "minilm", "cap": 5}}, "metrics_version": "m"}
    assert upgrade(old) == {"config": {"backend": {"name": "probe", "features": "minilm", "cap": 5}},
                            "metrics_version": "m"}
    assert old["config"]["backend"]["kind"] == "minilm"  # the record itself is not changed
    judge = {"config": {"backend": {"name": "hf", "batch_size": 8}}}
    assert upgrade(judge) == judge and upgrade({}) == {}
    assert all(k.startswith("config.") for k in (*RENAMED_KEYS, *RENAMED_KEYS.values()))


def test_a_probe_evaluation_recorded_with_backend_kind_stays_current(tmp_path):
    """backend.features was backend.kind: results recorded before the rename are not rerun for it."""
    build = make_build(tmp_path / "build", pairs_per_subset=2, train_per_subset=6)
    cfg = compose(["model=tiny", "backend=probe", "backend.features=lexical", f"data.dir={build}",
                   "backend.train_subsets=[sg_code]", f"backend.cache_dir={tmp_path / 'cache'}",
                   f"output_dir={tmp_path / 'out'}", "bootstrap.n=20", "wandb.mode=disabled", "progress=false"])
    evaluate(cfg)
    assert status(cfg).current
    rec = tmp_path / "out" / IDENTITY_FILE
    doc = json.loads(rec.read_text())
    backend = doc["identity"]["config"]["backend"]
    backend["kind"] = backend.pop("features")
    rec.write_text(json.dumps(doc))
    assert status(cfg).current, status(cfg).reason
    backend["kind"] = "minilm"  # the old spelling of another value is still a change
    rec.write_text(json.dumps(doc))
    st = status(cfg)
    assert not st.current and "features" in st.reason
