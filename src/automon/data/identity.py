"""What a data build is, for the build that records it and for `status` that compares it.

`BUILD_VERSION` names the build's logic; `config_identity(cfg)` is the build config as manifest.json
records it. Both the build (automon.data.build) and its status (automon.data.status) import them
from here, so neither imports the other for them.

manifest.json says what the build is, and its sha256 is the data hash that trained adapters and
evaluations record; so it holds nothing that depends on the machine that made it. How this machine
made it (the config keys in MACHINE_KEYS, where the sources lay, the sandbox isolation its code ran
under, versions) is the build record in build_log.json, outside the data hash.
"""

from __future__ import annotations

import json
from typing import Any

from omegaconf import OmegaConf

from automon.stage_status import flatten

# build-v2: the machine's facts (code and library versions, sandbox isolation, workers, the sources'
# directory) moved from manifest.json to build_log.json's build record.
# build-v3: the release config: the retired wordings switches left the config, so the manifest's `config` changed.
# build-v4: gold evidence on every misbehavior test sample: safety_qa's from annotations/safety_qa_evidence,
# safety_code's fix site where SVEN's fix deletes no line (automon.data.recipes.safety._fix_site_lines);
# the manifest's test_evidence. Texts and labels are build-v3's.
BUILD_VERSION = "build-v4"

# Where the build goes and whether it may replace one: not what it holds.
NON_IDENTITY_KEYS = ("out", "overwrite")
# How this machine makes the build, not what it holds (the same samples come out whatever they are):
# the isolation mode the sandbox is asked for, how many processes share the work, where the source
# files and their checksum list lie (their sha256 are in the manifest's `sources`).
MACHINE_KEYS = (("sandbox", "isolation"), ("sg_code", "workers"), ("disjoint", "workers"),
                ("sources", "root"), ("sources", "checksums"))


def _plain(cfg: Any) -> dict:
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)


def machine_config(cfg: Any) -> dict:
    """The MACHINE_KEYS of the build config, nested as in the config (build_log.json's build record)."""
    plain = _plain(cfg)
    out: dict = {}
    for node, key in MACHINE_KEYS:
        if isinstance(plain.get(node), dict) and key in plain[node]:
            out.setdefault(node, {})[key] = plain[node][key]
    return json.loads(json.dumps(out))


def source_identity(origin: dict) -> dict:
    """A source's origin as manifest.json records it: without the local directory it was read from
    (its files' sha256 say what was read)."""
    return {k: v for k, v in origin.items() if k != "root"}


def config_identity(cfg: Any) -> dict:
    """The build config as manifest.json records it (plain, resolved, JSON-shaped), without the
    machine's keys (MACHINE_KEYS)."""
    plain = _plain(cfg)
    ident = {k: v for k, v in plain.items() if k not in NON_IDENTITY_KEYS}
    for node, key in MACHINE_KEYS:
        if isinstance(ident.get(node), dict) and key in ident[node]:
            ident[node] = {k: v for k, v in ident[node].items() if k != key}
            if not ident[node]:
                del ident[node]
    if isinstance(ident.get("wordings"), dict):  # card text, not data (WordingsConfig.shortcut_notes)
        ident["wordings"] = {k: v for k, v in ident["wordings"].items() if k != "shortcut_notes"}
    policy = ident.pop("policy", None)
    # The policy node decides nothing in a template build (whose identity stays as it was); its
    # cache path says where answers are kept, not what they are.
    if plain.get("generator") == "policy" and policy is not None:
        ident["policy"] = {k: v for k, v in policy.items() if k != "cache"}
    return json.loads(json.dumps(ident))


# The fields of a manifest that say what the samples are, named first when two builds differ.
_FIRST = ("files.", "build_version", "config.", "seed", "sources.", "test_pairs.")


def manifest_differences(old: dict, new: dict, limit: int = 4) -> list[str]:
    """`field: old -> new` (dotted, values shortened) for the fields in which two manifests differ: the
    sample files', the build version's, the config's and the sources' first, then the rest (counts,
    audit, ...); at most `limit`, and a last entry counting the others."""
    a, b = flatten(old), flatten(new)
    absent = "<absent>"
    keys = [k for k in set(a) | set(b) if a.get(k, absent) != b.get(k, absent)]
    keys.sort(key=lambda k: (next((i for i, p in enumerate(_FIRST) if k == p.rstrip(".") or k.startswith(p)),
                                  len(_FIRST)), k))

    def short(v: Any) -> str:
        r = v if v is absent else repr(v)
        return r if len(r) <= 24 else r[:21] + "..."
    out = [f"{k}: {short(a.get(k, absent))} -> {short(b.get(k, absent))}" for k in keys[:limit]]
    return out + ([f"{len(keys) - limit} more"] if len(keys) > limit else [])
