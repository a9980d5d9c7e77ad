"""automon.adapter_meta: the adapter directory as training writes it and evaluation reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from automon.adapter_meta import ADAPTER_CONFIG_FILE, write_canonical_adapter_config
from automon.evaluation.monitors import adapter_hash

_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
_SAVE = ("import sys; from peft import LoraConfig; "
         f"LoraConfig(r=4, target_modules={_MODULES!r}).save_pretrained(sys.argv[1])")


def _peft_config(tmp_path, hashseed: str):
    """The directory of an adapter_config.json as PEFT writes it in a process with this PYTHONHASHSEED."""
    d = tmp_path / hashseed
    subprocess.run([sys.executable, "-c", _SAVE, str(d)], check=True,
                   env={**os.environ, "PYTHONHASHSEED": hashseed})
    return d


def test_the_same_adapter_config_is_the_same_bytes_whatever_the_hash_seed(tmp_path):
    """PEFT fills target_modules from a set: its order follows PYTHONHASHSEED. Training rewrites the file with
    them sorted, so the same training writes the same bytes (and its adapter the same hash) on every run."""
    dirs = [_peft_config(tmp_path, seed) for seed in ("1", "2")]  # two seeds that order these seven apart
    assert len({(d / ADAPTER_CONFIG_FILE).read_bytes() for d in dirs}) == 2  # what the rewrite is for
    for d in dirs:
        write_canonical_adapter_config(d)
    canonical = {(d / ADAPTER_CONFIG_FILE).read_bytes() for d in dirs}
    assert len(canonical) == 1
    written = json.loads(canonical.pop())
    assert written["target_modules"] == sorted(_MODULES) and written["r"] == 4


def test_the_adapter_hash_reads_the_config_in_its_canonical_form(tmp_path):
    """Two adapters that differ only in the order of target_modules are the same adapter: one hash, one cache."""
    dirs = []
    for name, modules in (("a", _MODULES), ("b", _MODULES[::-1])):
        d = tmp_path / name
        d.mkdir()
        (d / "adapter_model.safetensors").write_bytes(b"same weights")
        (d / ADAPTER_CONFIG_FILE).write_text(json.dumps({"r": 4, "target_modules": modules}, indent=2))
        dirs.append(d)
    assert adapter_hash(dirs[0]) == adapter_hash(dirs[1])
    (dirs[1] / "adapter_model.safetensors").write_bytes(b"other weights")
    assert adapter_hash(dirs[0]) != adapter_hash(dirs[1])
    (dirs[1] / "adapter_model.safetensors").write_bytes(b"same weights")
    (dirs[1] / ADAPTER_CONFIG_FILE).write_text(json.dumps({"r": 8, "target_modules": _MODULES}, indent=2))
    assert adapter_hash(dirs[0]) != adapter_hash(dirs[1])
