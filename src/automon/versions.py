"""Code and library versions recorded in every run directory and manifest."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import automon

_REPO = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def code_version() -> str:
    """`git describe --always --dirty` of the automon checkout, or the package version."""
    try:
        out = subprocess.run(["git", "-C", str(_REPO), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return f"automon-{automon.__version__}"


def library_versions(names=("torch", "transformers", "trl", "peft", "datasets", "accelerate",
                            "hydra-core", "datasketch", "unsloth", "vllm", "wandb")) -> dict[str, str]:
    out = {"automon": automon.__version__}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out
