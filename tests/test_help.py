"""`--help` of every entry script: its usage lines first, then every key a user sets with a
description taken from the schema's comments (automon.config.help)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, schema", [
    ("data_build/build.py", "automon.config.build:build_schema"),
    ("train/sft.py", "automon.config.train:SFTConfig"),
    ("eval/holdout.py", "automon.config.eval:HoldoutConfig"),
    ("train/probe.py", "automon.config.probe:ProbeTrainConfig"),
])
def test_help_starts_with_usage_and_describes_every_key(script, schema):
    import importlib

    from automon.config.help import key_lines

    module, name = schema.split(":")
    obj = getattr(importlib.import_module(module), name)
    obj = obj() if name == "build_schema" else obj
    r = subprocess.run([sys.executable, str(REPO / script), "--help"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    first_doc_line = (REPO / script).read_text().split('"""')[1].strip().splitlines()[0]
    assert r.stdout.startswith(first_doc_line)
    assert "Usage:" in r.stdout.split("Keys")[0] and "$CONFIG" not in r.stdout
    keys = r.stdout.split("Keys (key=value")[1].split("\n\n")[0].splitlines()[1:]
    assert keys == key_lines(obj)
    undocumented = [ln.split()[0] for ln in keys if len(ln.split()) < 2]
    assert not undocumented, f"schema fields without a comment (add one beside the field): {undocumented}"
    assert "== Config (with the overrides given) ==\n" in r.stdout  # then the composed config
