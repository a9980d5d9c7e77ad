"""Each backend declares its config schema and its cache identity; evaluation only asks the backend.

- conf/backend/<name>.yaml composes into that backend's own schema (that a misspelt key, a key of
  another backend or a typo inside the option file stops composition: tests/config/test_typos.py);
- two configs that differ in a field of a backend's identity get different cache keys, two that
  differ in any other field of that backend share one;
- a backend the evaluation has never heard of (registered by this test) is evaluated end to end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional, Sequence

import pytest
from support import compose, make_build
from automon.evaluation.scoring import cache_key
from automon.monitors import JudgeMonitor
from automon.backends import BACKENDS, BackendConfig, JudgeResult, JudgeTiming

BASE = JudgeMonitor("base", "base")
# an inspect log of automon's task (every subset, one pair each, the mock model answering yes), made by
# eval/inspect_task.py's task with inspect-ai 0.3.285
INSPECT_LOG = Path(__file__).parent / "data" / "inspect_mock.eval"
ADAPTER = JudgeMonitor("run_a", "sg_code", artifact_dir=Path("/runs/run_a/adapter"), artifact_hash="a" * 64)

# backend -> (overrides it needs, identity changes, non-identity changes)
CASES = {
    "hf": (["model=tiny"],
           ["backend.dtype=bfloat16", "backend.device=cuda", "model.revision=abc", "model=qwen3_4b_instruct_2507"],
           ["backend.batch_size=3", "backend.max_batch_tokens=999", "backend.chunk_size=7",
            "backend.max_seq_length=4096"]),
    "vllm": ([],
             ["model.dtype=float16", "model.revision=abc", "model=tiny"],
             ["backend.gpu_memory_utilization=0.5", "backend.max_loras=2", "backend.enable_prefix_caching=false",
              "backend.chunk_size=7", "backend.enforce_eager=true"]),
    "openai": (["model=api", "backend.model_name=gpt-x"],
               ["backend.model_name=gpt-y", "backend.base_url=http://127.0.0.1:8000/v1", "backend.logprobs=false"],
               ["backend.concurrency=2", "backend.timeout_s=5", "backend.max_retries=1",
                "backend.api_key_env=OTHER_KEY", "backend.chunk_size=7"]),
    # the fitted probe (subset, cap, seed, build) is the monitor's adapter hash, covered below
    "probe": (["model=tiny", "backend.features=hidden"],
              ["backend.features=lexical", "backend.layer=1", "backend.pooling=last", "backend.max_length=128",
               "model=smollm2_135m_instruct"],
              ["backend.batch_size=3", "backend.chunk_size=7"]),
    # a rule's predictions are keyed by its monitor's hash (the rule and REFERENCE_VERSION); no model reads
    "reference": ([], [], ["model=tiny", "backend.chunk_size=7", "backend.rules=[agrees]"]),
    # the log's bytes (sha256) and model are its identity: another log is another evaluation
    "inspect_log": ([f"backend.log={INSPECT_LOG}"], [], ["model=tiny", "backend.chunk_size=7"]),
}


def _needs(name: str) -> None:
    """backend=inspect_log reads its log at start-up: with inspect-ai only (the inspect extra)."""
    if name == "inspect_log":
        pytest.importorskip("inspect_ai")


def test_every_backend_has_a_case_here():
    assert set(CASES) == set(BACKENDS)


# ---------------------------------------------------------------- schemas

@pytest.mark.parametrize("name", sorted(CASES))
def test_each_option_composes_into_its_own_schema(name):
    _needs(name)
    c = compose([f"backend={name}", *CASES[name][0]])
    assert type(c.backend) is BACKENDS[name] and c.backend.name == name


def test_backend_name_cannot_be_swapped_under_a_schema():
    from automon.config.eval import ConfigError

    with pytest.raises(ConfigError, match="backend=<name>"):
        compose(["backend=hf", "model=tiny", "backend.name=vllm"])


# ---------------------------------------------------------------- cache identity

def _key(name: str, extra: Sequence[str] = (), m: JudgeMonitor = BASE, prompt_kind: str = "direct") -> dict[str, Any]:
    _needs(name)
    return cache_key(compose([f"backend={name}", *CASES[name][0], *extra]), m, prompt_kind)


@pytest.mark.parametrize("name", sorted(CASES))
def test_identity_fields_change_the_key_and_other_fields_do_not(name):
    _, identity, other = CASES[name]
    base = _key(name)
    assert base["backend"] == name
    for ov in identity:
        assert _key(name, [ov]) != base, ov
    for ov in other:
        assert _key(name, [ov]) == base, ov
    # the generation budget identifies an evidence answer, not a direct one (which reads one token)
    assert _key(name, ["backend.max_new_tokens=100"]) == base
    assert _key(name, ["backend.max_new_tokens=100"], prompt_kind="evidence") != _key(name, prompt_kind="evidence")
    # the adapter identifies a prediction for every backend
    assert _key(name, m=ADAPTER) != base


# ---------------------------------------------------------------- a backend evaluation has never seen

@dataclass
class EchoConfig(BackendConfig):
    """A backend with no local model: P(yes) from the number of characters of the prompt."""
    name: str = "echo"
    max_seq_length: Optional[int] = None
    modulus: int = 7

    local_model: ClassVar[bool] = False

    def cache_identity(self, model: Any, kind: str, adapter: str | None) -> dict[str, Any]:
        return {"model": model.pretrained, "modulus": self.modulus}

    def make_judge(self, model: Any, kind: str, adapters: Sequence[Any], tokenizer: Any) -> Any:
        assert tokenizer is None  # nothing local was loaded for it
        cfg = self

        class Echo:
            name = "echo"
            timing = JudgeTiming()

            def score(self, reqs):
                return [JudgeResult(p_yes=(sum(len(m["content"]) for m in r.messages) % cfg.modulus) / cfg.modulus,
                                    text="yes") for r in reqs]

            def close(self):
                pass

        return Echo()


@pytest.fixture()
def echo_backend(monkeypatch):
    from hydra.core.config_store import ConfigStore

    monkeypatch.setitem(BACKENDS, "echo", EchoConfig)
    cs = ConfigStore.instance()
    cs.store(group="backend", name="echo", node=EchoConfig)
    yield
    cs.repo["backend"].pop("echo.yaml", None)


def test_a_new_backend_is_evaluated_without_touching_evaluation(echo_backend, tmp_path):
    import json

    from automon.evaluation import evaluate

    build = make_build(tmp_path / "build", pairs_per_subset=1)
    ov = ["backend=echo", "model=tiny", f"data.dir={build}", f"output_dir={tmp_path / 'o'}", "wandb.mode=disabled",
          "progress=false", "bootstrap.n=20"]
    res = evaluate(compose(ov))
    rows = res.predictions["base"]
    assert res.n_computed == len(rows) == 12 and all(r["p_yes"] is not None for r in rows)
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert doc["backend"] == "echo" and doc["backend_config"]["modulus"] == 7
    assert doc["cache"]["key"]["modulus"] == 7 and doc["cache"]["key"]["backend"] == "echo"
    assert evaluate(compose(ov)).n_cached == 12  # its identity keys the cache
    assert evaluate(compose([*ov, "backend.modulus=5"])).n_computed == 12


def test_whether_ood_detectors_can_run_is_the_backends_answer_not_its_name(echo_backend, tmp_path, monkeypatch):
    """config/eval.py asks BackendConfig.local_weights: a new backend needs no line there."""
    from automon.config.common import ConfigError

    build = make_build(tmp_path / "build", pairs_per_subset=1)
    ov = ["backend=echo", "model=tiny", f"data.dir={build}", "detectors=[knn]", "fusion=lambda"]
    assert compose(ov).backend.name == "echo"  # no local tokenizer, but model= loads here
    monkeypatch.setattr(EchoConfig, "local_weights", False)
    with pytest.raises(ConfigError, match="OOD detectors read a local model"):
        compose(ov)
