"""What data_build/build.py runs: the build, with a kill by SIGTERM cleaning up like an error does.

User errors (BuildError, SourceError, ...) propagate to `automon.errors.run_cli`, which prints
them as one line and exits 2.
"""

from __future__ import annotations

import logging
import signal
import sys

from automon.data.audit import audit, build_shortcut_notes, card_section, exceed_message, plot
from automon.data.build import run_build
from automon.data.io import BUILD_COMMAND  # noqa: F401  (re-exported for messages elsewhere)
from automon.data.io import atomic_dir, load_build
from automon.errors import exit_by_signal, resend_dropped_signals


def _exit_on_sigterm(signum, frame) -> None:
    # SystemExit unwinds through the build's `finally` blocks (temp dir removed, sandbox workers
    # stopped); Python's default for SIGTERM would end the process on the spot and leave them.
    raise exit_by_signal(signum)


def stop_cleanly_on_sigterm() -> None:
    """SIGTERM ends the build (and each forked child, which inherits the handler) like an error does;
    a SIGTERM Python drops (it ran in a finalizer) is sent again (automon.errors.resend_dropped_signals)."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    resend_dropped_signals()


def main_build(cfg) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    stop_cleanly_on_sigterm()
    manifest = run_build(cfg)
    c = manifest["counts"]
    n = {split: sum(v for sub in c.get(split, {}).values() for v in sub.values()) for split in ("test", "train")}
    print(f"wrote {cfg.out}: test {n['test']:,} samples, train {n['train']:,} samples "
          f"(manifest.json, README.md)")
    return 0


def main_audit(cfg) -> int:
    """data_build/audit.py: audit a build on disk; its own files stay untouched (see AuditRunConfig.out)."""
    import json
    from pathlib import Path

    from omegaconf import OmegaConf

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    a = OmegaConf.to_object(cfg.audit)
    build = load_build(cfg.build, verify=("train", "test"))
    result = audit(build.samples("train"), build.samples("test"), a)
    result["build"] = {"dir": str(build.path), "manifest_hash": build.manifest_hash}
    out = Path(cfg.out) if cfg.out else build.path / "audit"
    section = card_section(result, build_shortcut_notes(build.manifest))
    with atomic_dir(out, overwrite=True) as tmp:
        (tmp / "audit.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        (tmp / "audit.md").write_text(section, encoding="utf-8")
        plot(result, tmp / "audit.png")
    print(section.split("\n\n", 2)[2].split("\n\n![")[0])
    print(f"wrote {out}/audit.json, audit.md, audit.png (build manifest sha256 {build.manifest_hash[:12]})")
    if result["exceeding"]:
        print(exceed_message(result), file=sys.stderr)
        return 2 if a.on_exceed == "fail" else 0
    return 0
