"""What an evaluation is, from its config alone: the typed config, where it writes, and the identity
its outputs are computed from. Both the evaluation (automon.evaluation.run) and its currency check
(automon.evaluation.status) go through here, so they agree on both.

An evaluation's outputs depend on its config (all of it but where it writes and how it reports
progress), the data build (manifest sha256), the monitors it scored (names, matrix labels, artifact
hashes) and the metrics version; with detectors=, the versions of the OOD features, detectors,
perplexity computation and fusion; with stress=, each stress's version and the robustness version,
and with stress=[paraphrase] by a model, that model (paraphrase.model: name, backend, weights
identity, budget, seed, instruction version); with monitors that quote (an evidence prompt), the
version of the evidence scoring against gold spans; and how the backend decodes the answers where it
records that (BackendConfig.decoding_identity: hf with the evidence prompt). `identity` computes that;
the evaluation records it in <output_dir>/identity.json once every output is written (`record`;
publishing a new output set removes the old record first, automon.evaluation.publish).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from automon.config.eval import HoldoutConfig
from automon.evaluation.robustness import ROBUSTNESS_VERSION, STRESSES, check_stress
from automon.evaluation.stresses.paraphrase import model_identity
from automon.evidence import EVIDENCE_VERSION
from automon.monitors import BASE, Monitor
from automon.monitors.fused import FusedMonitor
from automon.metrics import METRICS_VERSION
from automon.ood.detectors import DETECTORS_VERSION, NLL_VERSION
from automon.ood.fusion import FUSION_VERSION
from automon.probes.features import FEATURES_VERSION
from automon.prompts import get_template

IDENTITY_FILE = "identity.json"
IDENTITY_FORMAT = "automon-eval-identity-v1"
# Where outputs go and how a run reports: not what it computes. allow_other_build only lets an
# evaluation of an adapter from another build run at all (its outputs then say so); outputs of this
# build's adapters are the same either way, and results written before the key existed stay current.
NON_IDENTITY_KEYS = ("config.output_dir", "config.cache_dir", "config.progress", "config.wandb",
                     "config.allow_other_build")
# Config keys renamed since identities were first recorded: old dotted key -> new one. A record that
# spells a key the old way is read as if it spelled it the new way (the value means the same).
RENAMED_KEYS = {"config.backend.kind": "config.backend.features"}  # backend=probe: ProbeConfig.kind became .features


def as_config(cfg: Any) -> HoldoutConfig:
    """A composed Hydra config -> the typed HoldoutConfig (runs its cross-field checks, and checks
    stress= against the stress registry, which the config module cannot see)."""
    return check_stress(cfg if isinstance(cfg, HoldoutConfig) else OmegaConf.to_object(cfg))  # type: ignore[arg-type]


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "-", s).strip("-")


def model_label(c: HoldoutConfig) -> str:
    """The model as output names and report titles spell it (the backend's label, directory-safe)."""
    return _safe(c.backend.model_label(c.model))


def default_output_dir(c: HoldoutConfig, monitors: Sequence[Monitor]) -> Path:
    """evals/<model>__<adapter run name | base | sweep-NAME>__<prompt>__shots<k>: named by identity."""
    if c.sweep_dir:
        who = "sweep-" + _safe(Path(c.sweep_dir).resolve().name)
    elif c.adapter:
        who = monitors[0].name
    else:
        who = BASE
    seed = f"-seed{c.shots_seed}" if c.shots and c.shots_seed else ""
    return Path("evals") / f"{model_label(c)}__{who}__{c.prompt.name}__shots{c.shots}{seed}"


def output_dir(c: HoldoutConfig, monitors: Sequence[Monitor]) -> Path:
    """Where the evaluation writes: output_dir= if set, else the default named by identity."""
    return Path(c.output_dir) if c.output_dir else default_output_dir(c, monitors)


def identity(c: HoldoutConfig, monitors: Sequence[Monitor], manifest_hash: str) -> dict:
    """What an evaluation's outputs are computed from (JSON-shaped)."""
    config = OmegaConf.to_container(OmegaConf.structured(c), resolve=True)
    # The paraphrase model counts only where it rewrites (stress=[paraphrase], paraphrase.model set):
    # then "paraphrase" below records it; else the identity stays what it was before the key existed.
    config.pop("paraphrase", None)  # type: ignore[union-attr]
    # The fused monitors follow from their judges and the detectors=/fusion= settings (both recorded
    # here), and status() resolves none: listed, they made every evaluation with fusion stale.
    monitors = [m for m in monitors if not isinstance(m, FusedMonitor)]
    ident = {
        "config": config,
        "data_manifest_hash": manifest_hash,
        # "adapter_hash" as recorded before Monitor.artifact_hash was renamed: another key would make
        # every recorded evaluation stale
        "monitors": {m.name: {"label": m.row, "adapter_hash": m.artifact_hash} for m in monitors},
        "metrics_version": METRICS_VERSION,
    }
    if any(m.gives_quotes for m in monitors):  # only then, so an evaluation without quotes keeps its identity
        ident["evidence_version"] = EVIDENCE_VERSION  # its evidence figures (and quote columns) are this rule's
    source = c.backend.source_identity()
    if source is not None:  # only then (backend=inspect_log: the log's bytes), so other identities stay as they were
        ident["source"] = source
    decoding = c.backend.decoding_identity(get_template(c.prompt.name).kind)
    if decoding:  # only then (hf with the evidence prompt), so every other evaluation keeps its identity
        # how the answers were decoded: hf evidence answers decoded unconstrained are not current
        ident["decoding"] = decoding
    if c.detectors:  # only then, so an evaluation without detectors keeps the identity it had
        # the fused monitors' scores are computed by these versions' features, detectors and fusion
        ident["ood"] = {"detectors": DETECTORS_VERSION, "nll": NLL_VERSION, "features": FEATURES_VERSION,
                        "fusion": FUSION_VERSION}
    if c.stress:  # only then, so an evaluation without stress keeps the identity it had
        # a stress whose version changed stressed other bytes: its outputs are not current
        ident["stresses"] = {name: STRESSES[name].version for name in c.stress}
        ident["robustness_version"] = ROBUSTNESS_VERSION
        paraphrase_model = model_identity(c)  # the stressed bytes depend on the model that rewrote them
        if paraphrase_model is not None:
            ident["paraphrase"] = paraphrase_model
    return json.loads(json.dumps(ident))


def upgrade(ident: dict) -> dict:
    """A recorded identity with renamed config keys (RENAMED_KEYS) spelled the current way."""
    out = json.loads(json.dumps(ident))
    for old, new in RENAMED_KEYS.items():
        *parents, key = old.split(".")
        node = out
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node:
            value = node.pop(key)
            node.setdefault(new.split(".")[-1], value)
    return out


def record(out_dir: Path, ident: dict, files: Sequence[Path], release: str) -> None:
    """After every output is written: what they were computed from, and which files they are. `release`
    (automon.release.release_line) is the data hash's meaning for a reader, beside the identity: it
    follows from data_manifest_hash, so it decides nothing about currency."""
    doc = {"format": IDENTITY_FORMAT, "identity": ident, "release": release,
           "files": sorted(str(Path(f).relative_to(out_dir)) for f in files)}
    tmp = out_dir / f".{IDENTITY_FILE}.tmp"
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out_dir / IDENTITY_FILE)
