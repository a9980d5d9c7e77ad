"""The Monitor type: a new kind of monitor is one class and one registry entry, evaluated end to end
with nothing in the evaluation changed; a fused monitor keeps its score in its own field; a registered
stress runs before rendering and keeps stressed samples apart from the originals."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional, Sequence

import pytest

from support import compose, make_build
from automon.backends import BACKENDS, BackendConfig
from automon.monitors import DEFINED_BY_BACKEND, Monitor, Prediction, Rendered


@dataclass(eq=False)
class LengthMonitor(Monitor):
    """A toy monitor kind: flags long responses (P = share of `limit` characters, at most 1)."""
    limit: int = 100
    monitor_kind: ClassVar[str] = "length"

    def score(self, items: Sequence[Rendered]) -> list[Prediction]:
        return [Prediction(p_yes=min(1.0, len(it.sample.response) / self.limit)) for it in items]

    def flag(self, p: Prediction) -> Optional[int]:
        return None if p.p_yes is None else int(p.p_yes >= 0.5)


@dataclass
class LengthConfig(BackendConfig):
    name: str = "length"
    limit: int = 100
    local_model: ClassVar[bool] = False
    defines_monitors: ClassVar[Optional[str]] = "length"

    def cache_identity(self, model: Any, kind: str, adapter: Optional[str]) -> dict[str, Any]:
        return {"limit": self.limit}


def length_monitors(c: Any, manifest_hash_of) -> list[Monitor]:
    return [LengthMonitor(name=f"length{c.backend.limit}", row="all", artifact_hash=manifest_hash_of(c.data.dir)[:8],
                          limit=c.backend.limit)]


@pytest.fixture()
def length_kind(monkeypatch):
    from hydra.core.config_store import ConfigStore

    monkeypatch.setitem(BACKENDS, "length", LengthConfig)
    monkeypatch.setitem(DEFINED_BY_BACKEND, "length", length_monitors)
    cs = ConfigStore.instance()
    cs.store(group="backend", name="length", node=LengthConfig)
    yield
    cs.repo["backend"].pop("length.yaml", None)


def test_a_new_kind_of_monitor_is_evaluated_without_touching_evaluation(length_kind, tmp_path):
    from automon.evaluation import evaluate

    build = make_build(tmp_path / "build", pairs_per_subset=1)
    ov = ["backend=length", "model=tiny", f"data.dir={build}", f"output_dir={tmp_path / 'o'}", "wandb.mode=disabled",
          "progress=false", "bootstrap.n=20", "far_reference=true", "ood.cap=4"]
    res = evaluate(compose(ov))
    [m] = res.monitors
    assert isinstance(m, LengthMonitor) and m.name == "length100"
    rows = res.predictions[m.name]
    assert len(rows) == 12 and all(r["p_yes"] == min(1.0, len(r_s) / 100) for r, r_s in
                                   zip(rows, _responses(build, [r["id"] for r in rows])))
    assert all(r["pred"] == int(r["p_yes"] >= 0.5) for r in rows)
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert doc["monitor"]["kind"] == "length" and doc["far_reference"]["in_distribution"] == "all"
    assert evaluate(compose(ov)).n_computed == 0  # cached like any monitor's predictions


def _responses(build, ids):
    from automon.data.io import load_build

    by_id = {s.id: s.response for s in load_build(build).samples("test")}
    return [by_id[i] for i in ids]


def test_a_fused_prediction_keeps_its_score_apart_from_p_yes():
    judge = Prediction(p_yes=0.8, text="yes", mass=0.9)
    fused = Prediction(fused=-1.5)
    assert judge.score == 0.8 and fused.score == -1.5 and fused.p_yes is None
    assert Prediction(error="boom").score is None


def test_a_registered_stress_runs_before_rendering_with_ids_of_its_own(tmp_path, monkeypatch):
    from automon.config.eval import ConfigError
    from automon.evaluation.inputs import prepare_inputs
    from automon.evaluation.monitors import resolve_monitors
    from automon.evaluation.stresses import STRESSES, Stress
    from automon.schema import SUBSETS

    monkeypatch.setitem(STRESSES, "shout", Stress("shout", 1, "capitals", frozenset(SUBSETS), lambda s, rng: replace(
        s, response=s.response.upper(), evidence=[e.upper() for e in s.evidence])))
    build = make_build(tmp_path / "build", pairs_per_subset=1)
    ov = ["backend=hf", "model=tiny", f"data.dir={build}", f"output_dir={tmp_path / 'o'}"]
    tm: dict[str, float] = defaultdict(float)
    c = compose(ov)
    plain = prepare_inputs(c, resolve_monitors(c), tm)
    c = compose([*ov, "stress=[shout]"])
    loud = prepare_inputs(c, resolve_monitors(c), tm)
    assert plain.stressed == {} and [it.prompt_sha for it in loud.items] == [it.prompt_sha for it in plain.items]
    stressed = loud.stressed["shout"]
    assert [s.id + "~shout" for s in plain.test] == [it.sample.id for it in stressed]
    assert all(p.pair_id + "~shout" == it.sample.pair_id for p, it in zip(plain.test, stressed))
    for p, s in zip(plain.items, stressed):
        assert s.sample.response == p.sample.response.upper() and s.sample.response in s.prompt
        assert s.prompt_sha != p.prompt_sha
    c = compose([*ov, "stress=[whisper]"])
    with pytest.raises(ConfigError, match="whisper.*registered stresses: .*shout"):
        prepare_inputs(c, resolve_monitors(c), tm)


def test_a_probe_is_described_by_its_artifact_not_as_an_adapter(tmp_path):
    from automon.monitors import ProbeMonitor

    d = ProbeMonitor(name="lexical-sg_code", row="sg_code", artifact_dir=tmp_path / "probe", artifact_hash="h").describe()
    assert d["kind"] == "probe" and d["artifact"] == str(tmp_path / "probe") and d["artifact_hash"] == "h"
    assert not any(k.startswith("adapter") for k in d)


def test_a_fused_monitor_is_described_as_the_monitor_it_wraps():
    from types import SimpleNamespace

    from automon.monitors import FusedMonitor, JudgeMonitor, ProbeMonitor

    probe = ProbeMonitor(name="lexical-sg_code", row="sg_code", artifact_hash="h")
    fused = FusedMonitor.around(probe, SimpleNamespace(fusion="mean"), [], [])
    assert fused.monitor_kind == "probe" and fused.in_distribution == "sg_code"
    assert fused.describe() == {**probe.describe(), "name": "lexical-sg_code+mean", "label": "sg_code+mean"}
    base = FusedMonitor.around(JudgeMonitor(name="base", row="base"), SimpleNamespace(fusion="lambda"), [], [])
    assert base.monitor_kind == "lora" and base.in_distribution == "all" and base.lora is None
