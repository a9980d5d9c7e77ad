"""Whether eval/holdout.py has anything left to do for a config: `status(cfg)`.

An evaluation's outputs depend on its config (all of it but where it writes and how it reports
progress), the data build (manifest sha256), the monitors it scored (names, matrix labels, adapter
content hashes) and the metrics version. `identity` computes that; the evaluation records it in
<output_dir>/identity.json once every output is written (and removes it before it rewrites any),
and `status` compares the record with the identity of a config now. An evaluation whose
predictions are cached but whose record is missing or stale simply reruns (the prediction cache
makes that cheap).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from automon.stage_status import Currency, Status, config_diff, diff_reason

IDENTITY_FILE = "identity.json"
IDENTITY_FORMAT = "automon-eval-identity-v1"
# Where outputs go and how a run reports: not what it computes. allow_other_build only lets an
# evaluation of an adapter from another build run at all (its outputs then say so); outputs of this
# build's adapters are the same either way, and results written before the key existed stay current.
NON_IDENTITY_KEYS = ("config.output_dir", "config.cache_dir", "config.progress", "config.wandb",
                     "config.allow_other_build")


def identity(c: Any, monitors: Sequence[Any], manifest_hash: str) -> dict:
    """What an evaluation's outputs are computed from (JSON-shaped). `c` is a HoldoutConfig."""
    from automon.metrics import METRICS_VERSION

    return json.loads(json.dumps({
        "config": OmegaConf.to_container(OmegaConf.structured(c), resolve=True),
        "data_manifest_hash": manifest_hash,
        "monitors": {m.name: {"label": m.label, "adapter_hash": m.adapter_hash} for m in monitors},
        "metrics_version": METRICS_VERSION,
    }))


def forget(out_dir: Path) -> None:
    """Before an evaluation rewrites any output: until it records again, the outputs are not current."""
    (out_dir / IDENTITY_FILE).unlink(missing_ok=True)


def record(out_dir: Path, ident: dict, files: Sequence[Path]) -> None:
    """After every output is written: what they were computed from, and which files they are."""
    doc = {"format": IDENTITY_FORMAT, "identity": ident,
           "files": sorted(str(Path(f).relative_to(out_dir)) for f in files)}
    tmp = out_dir / f".{IDENTITY_FILE}.tmp"
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out_dir / IDENTITY_FILE)


def status(cfg: Any) -> Status:
    """current or stale/missing, for a composed holdout.yaml config. Resolving the monitors hashes
    the adapters and raises what the evaluation would (EvalError, AdapterMismatch, BuildNotFound)."""
    from automon.data.io import load_build
    from automon.evaluation.monitors import resolve_monitors
    from automon.evaluation.run import as_config, default_output_dir

    c = as_config(cfg)
    monitors = resolve_monitors(c)
    out = Path(c.output_dir) if c.output_dir else default_output_dir(c, monitors)
    rec = out / IDENTITY_FILE
    if not rec.exists():
        what = "an unfinished or older evaluation" if (out / "config.yaml").exists() else "no evaluation"
        return Status(Currency.MISSING, f"{what} at {out} (no {IDENTITY_FILE})")
    try:
        doc = json.loads(rec.read_text())
    except ValueError:
        return Status(Currency.STALE, f"{rec} is not valid JSON")
    if doc.get("format") != IDENTITY_FORMAT:
        return Status(Currency.STALE, f"{rec} has format {doc.get('format')!r}, expected {IDENTITY_FORMAT!r}")
    now = identity(c, monitors, load_build(c.data.dir).manifest_hash)
    diff = config_diff(doc.get("identity") or {}, now, NON_IDENTITY_KEYS)
    if diff:
        return Status(Currency.STALE, diff_reason("evaluation inputs changed", diff))
    missing = [f for f in doc.get("files") or [] if not (out / f).exists()]
    if missing:
        return Status(Currency.STALE, f"outputs missing in {out}: {', '.join(missing[:4])}")
    return Status(Currency.CURRENT, f"{len(monitors)} monitors scored on this data build with these adapters "
                                    "and settings")
