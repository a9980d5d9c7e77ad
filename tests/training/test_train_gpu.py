"""On a CUDA GPU: train/sft.py with trainer=unsloth and trainer=peft trains the tiny model in bf16 and
saves an adapter that evaluation reads back, on the GPU and on the CPU, to the same scores.

Skipped without CUDA (and the unsloth case without the unsloth package). The CPU suite covers the
peft trainer; these are the checks of the GPU path that CI's machines cannot run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cpu_overrides, has_cuda, run_holdout, run_sft, tiny_overrides

from automon.adapter_meta import AdapterMeta


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")]
STEPS = 16


def _p_yes(out: Path) -> dict[str, float]:
    (pred,) = out.rglob("predictions.jsonl")
    return {r["id"]: r["p_yes"] for r in map(json.loads, pred.read_text().splitlines())}


@pytest.mark.parametrize("trainer", ["peft", "unsloth"])
def test_a_gpu_run_trains_and_its_adapter_scores_the_same_on_gpu_and_cpu(trainer, small_build, tmp_path):
    if trainer == "unsloth":
        pytest.importorskip("unsloth", reason="trainer=unsloth needs the unsloth package ([gpu-train] extra)")
    run = tmp_path / "run"
    r = run_sft(*tiny_overrides(small_build, run, "subset=all", f"trainer={trainer}", "model.dtype=bfloat16",
                                f"train.max_steps={STEPS}", "train.save_steps=1000"))
    assert r.returncode == 0, r.stderr[-4000:]
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "complete" and info["trainer"] == trainer and info["device"].startswith("cuda")
    losses = [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == STEPS and losses[-1] < losses[0], losses          # it learned something
    adapter = run / "adapter"
    meta = AdapterMeta.read(adapter)
    assert (meta.subset, meta.lora_rank) == ("all", 8)

    scores = {}
    for device in ("cuda", "cpu"):
        out = tmp_path / f"eval-{device}"
        e = run_holdout(*cpu_overrides(small_build, out, f"adapter={adapter}", f"backend.device={device}"),
                        timeout=600)
        assert e.returncode == 0, e.stderr[-4000:]
        scores[device] = _p_yes(out)
    assert scores["cuda"].keys() == scores["cpu"].keys() and scores["cpu"]
    diff = max(abs(scores["cuda"][k] - scores["cpu"][k]) for k in scores["cpu"])
    assert diff < 0.02, (diff, scores)   # CUDA and CPU kernels differ slightly; the adapter is read alike
