"""The build's files: train.jsonl and test.jsonl (written, re-read and re-checked by a forked process
while the shortcut audit runs), manifest.json, the dataset card, audit.png and build_log.json.

manifest.json is what the build is (its sha256 is the data hash); build_log.json is how this machine
made it: timings and the build record (`build_record`), outside the data hash (automon.data.identity).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

from automon.data.audit import audit, exceed_message
from automon.data.audit import plot as plot_audit
from automon.data.card import dataset_card
from automon.data.hub import features_of
from automon.data.check import BuildError
from automon.data.context import BuildContext
from automon.data.disjoint import ConflictReport, verify_build
from automon.data.forked import Forked
from automon.data.identity import BUILD_VERSION, config_identity, machine_config, source_identity
from automon.data.io import write_manifest_files, write_sample_files
from automon.data.verdicts import load_gold
from automon.data.safety_report import manifest_entry
from automon.schema import Sample
from automon.subsets import specs
from automon.sources import source_origin
from automon.sources.synthetic import synthetic_marker
from automon.versions import code_version, library_versions

log = logging.getLogger("automon.data")


def write_verified_build(ctx: BuildContext, tmp: Path, train: list[Sample], test: list[Sample],
                         sizes: dict[str, int], report, bad: set[str], test_keys: set[str], memo: dict,
                         t_start: float) -> dict:
    """Write the build into `tmp`; returns the manifest. A forked child writes the sample files and then
    re-reads and re-checks them (the post-write verification) while the audit runs here; the manifest
    takes the files' hashes from it, and the card is written here. run_build's last step; `tmp` is its
    atomic_dir. (automon.data.io.write_build is the other writer: a given manifest, atomically, no checks.)"""
    d = ctx.cfg.disjoint
    t_write = time.perf_counter()
    record = build_record(ctx, train + test)
    check = (d.ngram, d.num_perm, d.threshold, d.workers) if d.verify_after_write else None
    try:
        # The child inherits memo (the filter's MinHash signatures, a pure function of each text) and
        # re-reads the files itself: it shares nothing else with the filter.
        with Forked(_write_and_verify, tmp, train, test, check, memo, name="sample files + post-write verification") \
                as writing:
            written = _write_manifest(ctx, tmp, train, test, lambda: _written_files(ctx, writing), sizes, report, bad,
                                      test_keys, record)
        ctx.timings["write+verify"] = time.perf_counter() - t_write
        # Timings are NOT in the manifest: they would break byte-identical rebuilds. They go to
        # build_log.json beside it (not covered by the manifest) and to the log.
        ctx.timings["total"] = time.perf_counter() - t_start
        log_ = {"build": record, "timings_s": {k: round(v, 3) for k, v in ctx.timings.items()},
                "n_train": len(train), "n_test": len(test)}
        if ctx.policy is not None:  # cached vs generated answers differ between runs: not in the manifest
            log_["policy_generation"] = {k: round(v, 3) for k, v in ctx.policy.stats.items()}
        (tmp / "build_log.json").write_text(json.dumps(log_, indent=2) + "\n")
    except OSError as e:
        raise BuildError(f"cannot write the build: {e.strerror}", e.filename,
                         "free some space (or quota) there, or choose another out=") from e
    return written


def _write_and_verify(tmp: Path, train: list[Sample], test: list[Sample], check: tuple | None,
                      memo: dict) -> tuple[dict[str, str], ConflictReport | None, float, float]:
    """The sample files (name -> sha256), then, with `check` (ngram, num_perm, threshold, workers), the
    disjointness report of the files as re-read from disk; and the seconds of each."""
    t0 = time.perf_counter()
    files = write_sample_files(tmp, train, test)
    t1 = time.perf_counter()
    final = verify_build(tmp, *check, memo) if check is not None else None
    return files, final, t1 - t0, time.perf_counter() - t1


def _written_files(ctx: BuildContext, writing: Forked) -> dict[str, str]:
    """The sample files' hashes, once the child wrote and re-checked them; a conflict it found stops the build."""
    (files, final, ctx.timings["write files"], verify_s), _ = writing.result()
    if final is not None:
        ctx.timings["verify"] = verify_s
        if final.conflicts:
            raise BuildError(f"post-write disjointness check failed: {final.by_kind()} e.g. "
                             f"{final.conflicts[0].to_dict()}; nothing was written to {ctx.cfg.out}")
    return files


def build_record(ctx: BuildContext, samples: list[Sample]) -> dict:
    """How this machine made the build (build_log.json `build`): none of it is in manifest.json, so a
    build made with another isolation mode, worker count, checkout, library versions or sources
    directory has the same data hash when its samples are the same."""
    cfg = ctx.cfg
    # mode -> samples whose code ran under it, as its subset's recipe reported it
    counts = Counter(mode for s in samples if (mode := ctx.isolation.get(s.subset)))
    return {
        "code_version": code_version(),
        "libraries": library_versions(("datasketch", "numpy", "scikit-learn", "hydra-core", "omegaconf")),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "config": machine_config(cfg),  # automon.data.identity.MACHINE_KEYS
        "sandbox_isolation": dict(sorted(ctx.isolation.items())),  # subset -> the mode its code ran under
        "sandbox_isolation_samples": dict(sorted(counts.items())),  # mode -> samples (the card's warning)
        "source_checksums_list": str(ctx.checksums.path) if ctx.checksums else None,
    }


def _write_manifest(ctx: BuildContext, tmp: Path, train: list[Sample], test: list[Sample],
                    files: Callable[[], dict[str, str]], sizes: dict[str, int], report, bad: set[str],
                    test_keys: set[str], record: dict) -> dict:
    """The shortcut audit (which may stop the build), then manifest.json, the card and audit.png.
    Beside the audit, a forked child writes the annotated safety pairs' report (it reads only the
    samples); beside the manifest and card, another draws audit.png (not in the manifest). `files()`
    gives the sample files' hashes once they are written (and checked)."""
    cfg = ctx.cfg
    with ExitStack() as children:  # a child still running when this fails is ended on the way out
        safety = None
        if cfg.wordings.safety_annotations and ctx.test_caps:  # safety_report.py
            safety = children.enter_context(Forked(
                manifest_entry, cfg.wordings.safety_annotations, {s: int(getattr(cfg.test, s)) for s in ctx.test_caps},
                sizes, train, test, cfg.seed, name="safety report"))
        audit_result = None
        if cfg.audit.enabled:
            audit_result = ctx.timed("audit", audit, train, test, cfg.audit)
            if audit_result["exceeding"]:
                msg = exceed_message(audit_result)
                if cfg.audit.on_exceed == "fail":
                    raise BuildError(msg, None, "change the templates of those subsets (a new wordings version) so "
                                                "both labels read alike, or pass audit.on_exceed=warn to build anyway")
                log.warning("%s", msg)
        plotting = None
        if audit_result is not None:
            plotting = children.enter_context(Forked(plot_audit, audit_result, tmp / "audit.png", name="audit plot"))
        manifest = _manifest(ctx, train, test, sizes, report, bad, test_keys, audit_result)
        if safety is not None:
            manifest["safety_annotations"], ctx.timings["safety report"] = safety.result()
        written = write_manifest_files(tmp, manifest, files(), train + test,
                                       extra_files={"README.md": lambda m: dataset_card(m, record,
                                                                                         features_of(train + test))})
        if plotting is not None:
            plotting.result()
    return written


def _test_evidence(cfg, test: list[Sample]) -> dict:
    """Per subset, the misbehavior test samples and how many carry evidence (every quote an exact
    substring of the response: Sample.validate); with the gold file a subset's evidence was read from."""
    out: dict = {}
    for s in test:
        if s.label == 1:
            row = out.setdefault(s.subset, {"misbehavior": 0, "with_evidence": 0})
            row["misbehavior"] += 1
            row["with_evidence"] += bool(s.evidence)
    for spec in specs():
        if spec.evidence_gold and cfg.wordings.safety_annotations and out.get(spec.name, {}).get("with_evidence"):
            out[spec.name]["gold"] = {"annotations": spec.evidence_gold, "sha256": load_gold(spec.evidence_gold).sha256}
    return dict(sorted(out.items()))


def _manifest(ctx: BuildContext, train: list[Sample], test: list[Sample], sizes: dict[str, int], report,
              bad: set[str], test_keys: set[str], audit_result: dict | None) -> dict:
    """manifest.json's document (the safety report apart)."""
    cfg, d = ctx.cfg, ctx.cfg.disjoint
    manifest = {
        "build_version": BUILD_VERSION,
        "seed": cfg.seed,
        # out/overwrite say where, not what, and the machine's keys how: leave them out so that two
        # builds of the same samples hash the same (build_log.json records the machine's).
        "config": config_identity(cfg),
        "sources": {name: source_identity(source_origin(name, cfg.sources.root, cfg.sources.revisions.get(name),
                                                        ctx.digests))
                    for name in sorted(ctx.sources_used)},
        "source_checksums": {"on_mismatch": cfg.sources.on_checksum,
                             "differences": dict(sorted(ctx.differences.items()))},
        "malformed_rows_skipped": dict(sorted(ctx.malformed.items())),
        "dropped": dict(sorted(ctx.drops.items())),
        "disjointness": {
            "params": report.params,
            "conflicts_found": report.by_kind(),
            "conflicts_dropped": len(bad),
            "conflict_examples": [c.to_dict() for c in report.conflicts[:50]],
            "on_conflict": d.on_conflict,
            "source_item_keys_in_test": len(test_keys),
        },
        "test_pairs": sizes,
    }
    constructs = Counter(f"{s.split}/{s.subset}/{s.meta.get('family', 'extra')}/{s.label}/"
                         + ("tampering" if s.meta["constructs"]["tampering"] else
                            "test_keyed" if s.meta["constructs"]["test_keyed"] else "neither")
                         for s in train + test if isinstance(s.meta.get("constructs"), dict))
    if constructs:  # sg_code: what the construct check read (it passed, or no build)
        manifest["constructs"] = dict(sorted(constructs.items()))
    controls = Counter(f"{s.subset}/{s.meta['control']}" for s in train if s.meta.get("control"))
    if controls:  # benign training controls (sg_qa's, and the contrast controls of the training split)
        manifest["controls"] = dict(sorted(controls.items()))
    test_controls = Counter(f"{s.subset}/{s.meta['control']}" for s in test if s.meta.get("control"))
    if test_controls:  # contrast controls in the test split (automon.controls)
        manifest["test_controls"] = dict(sorted(test_controls.items()))
    manifest["test_evidence"] = _test_evidence(cfg, test)
    if audit_result is not None:
        manifest["audit"] = audit_result
    marker = synthetic_marker(cfg.sources.root)
    if marker:  # only then, so that a real build's manifest is unchanged
        manifest["synthetic_sources"] = marker
    if ctx.policy is not None:
        manifest["policy"] = {"generator": ctx.policy.describe(), "subsets": ctx.policy_report}
    return manifest
