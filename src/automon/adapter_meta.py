"""What a trained adapter records about how it was trained; evaluation checks it before scoring.

Training writes `<run>/adapter/automon_adapter.json`; evaluation refuses an adapter whose base model,
prompt (or prompt fit version) or thinking setting differ from the evaluation config unless
allow_mismatch=true. `check_adapter_files` reads what loading the adapter relies on (the PEFT config,
the weights' safetensors header and size, the LoRA ranks, that no weight is inf or NaN, this record)
without loading a model:
evaluation and the training stage's "is it current?" both ask it, so a damaged adapter is neither
scored (a traceback deep in PEFT) nor taken for a finished run.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from automon.errors import UserError

ADAPTER_META_FILE = "automon_adapter.json"
ADAPTER_CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_RETRAIN = ("retrain it (rerun the train/sft.py command that made it: it resumes from its newest "
            "checkpoint), or restore the adapter directory")


class AdapterError(UserError):
    """An adapter directory whose files cannot be what training wrote (missing, cut, another rank)."""


@dataclass
class AdapterMeta:
    base_model: str          # ModelConfig.name, e.g. qwen3_4b_instruct_2507
    pretrained: str          # ModelConfig.pretrained (hub id / local dir / "tiny")
    prompt: str              # the prompt's one name, e.g. direct_v1 (== prompt=<name>)
    enable_thinking: bool
    subset: str              # training subset name (e.g. safety_code, all)
    data_manifest_hash: str  # sha256 of the build's manifest.json
    lora_rank: int
    automon_version: str
    code_version: str = ""   # git describe of the training code, when available
    prompt_fit: str = ""     # automon.prompts.FIT_VERSION of training ("": written before fit versions)
    extra: dict = field(default_factory=dict)

    def write(self, adapter_dir: str | Path) -> Path:
        p = Path(adapter_dir) / ADAPTER_META_FILE
        p.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")
        return p

    @classmethod
    def read(cls, adapter_dir: str | Path) -> "AdapterMeta":
        p = Path(adapter_dir) / ADAPTER_META_FILE
        if not p.exists():
            raise FileNotFoundError(f"{p} is missing: {adapter_dir} was not written by automon's "
                                    "training stage (train/sft.py); pass allow_mismatch=true to use it anyway")
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, OSError) as e:
            raise AdapterError(f"{ADAPTER_META_FILE} cannot be read ({e})", str(p), _RETRAIN) from None
        if not isinstance(d, dict):
            raise AdapterError(f"{ADAPTER_META_FILE} is a JSON {type(d).__name__}, not an object", str(p), _RETRAIN)
        if "prompt_version" in d:  # files written before the prompt had one name; the value is that name
            d.setdefault("prompt", d.pop("prompt_version"))
        known = {f for f in cls.__dataclass_fields__}
        missing = [f for f, spec in cls.__dataclass_fields__.items()
                   if f not in d and spec.default is spec.default_factory]  # dataclasses.MISSING for both
        if missing:
            raise AdapterError(f"{ADAPTER_META_FILE} lacks {', '.join(missing)}", str(p), _RETRAIN)
        for name, want in _META_TYPES.items():  # "lora_rank": "abc" once failed deep in the evaluation
            v = d.get(name)
            if name in d and v is not None and (not isinstance(v, want) or (want is int and isinstance(v, bool))):
                kind = want.__name__ if isinstance(want, type) else " or ".join(t.__name__ for t in want)
                article = "an" if kind[0] in "aeiou" else "a"
                raise AdapterError(f"{ADAPTER_META_FILE} has {name}={v!r}, not {article} {kind}", str(p), _RETRAIN)
        if d.get("lora_rank") is not None and d["lora_rank"] < 1:
            raise AdapterError(f"{ADAPTER_META_FILE} has lora_rank={d['lora_rank']}, not a rank >= 1", str(p), _RETRAIN)
        return cls(**{k: v for k, v in d.items() if k in known})


# The JSON type of each field of automon_adapter.json (null is accepted where a default exists).
_META_TYPES: dict[str, Any] = {"base_model": str, "pretrained": str, "prompt": str, "enable_thinking": bool,
                               "subset": str, "data_manifest_hash": str, "lora_rank": int, "automon_version": str,
                               "code_version": str, "prompt_fit": str, "extra": dict}


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a .safetensors header, checking that the file holds every byte the
    header promises (an empty, cut or foreign file fails here, not inside PEFT)."""
    fail = f"{path.name} is not a complete safetensors file"
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else 0
        if n <= 0 or n > size - 8 or n > 100 << 20:
            raise AdapterError(f"{fail} ({size} bytes, no valid header)", str(path), _RETRAIN)
        try:
            header = json.loads(f.read(n))
            tensors = {k: v for k, v in header.items() if k != "__metadata__"}
            end = max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
            shapes = {k: [int(x) for x in v["shape"]] for k, v in tensors.items()}
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise AdapterError(f"{fail} (its header does not parse: {e})", str(path), _RETRAIN) from None
    if size != 8 + n + end:
        raise AdapterError(f"{fail}: {size} bytes where its header promises {8 + n + end} (cut short?)",
                           str(path), _RETRAIN)
    if not shapes:
        raise AdapterError(f"{path.name} holds no tensors", str(path), _RETRAIN)
    return shapes


# Bits of a float's exponent field, all ones for inf and NaN; safetensors dtype -> (width in bytes, mask).
_EXPONENT = {"F32": (4, 0x7F800000), "F16": (2, 0x7C00), "BF16": (2, 0x7F80), "F64": (8, 0x7FF0000000000000)}


def nonfinite_tensors(path: Path) -> list[str]:
    """Names of the tensors in a (complete, see safetensors_shapes) .safetensors file that hold inf or NaN,
    read off the exponent bits of the memory-mapped data (no torch; a LoRA adapter takes milliseconds)."""
    import numpy as np

    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n) if path.stat().st_size > 8 + n else None
    bad = []
    for name, t in header.items():
        if name == "__metadata__" or t.get("dtype") not in _EXPONENT or data is None:
            continue
        width, mask = _EXPONENT[t["dtype"]]
        start, end = (int(x) for x in t["data_offsets"])
        words = data[start:end].view(f"<u{width}")
        if np.any((words & np.array(mask, dtype=words.dtype)) == mask):
            bad.append(name)
    return bad


def lora_ranks(shapes: dict[str, list[int]]) -> dict[str, int]:
    """Module -> LoRA rank read off the weights (lora_A is [r, in], lora_B [out, r])."""
    out = {}
    for name, shape in shapes.items():
        m = re.match(r"(.*)\.lora_([AB])(?:\.[^.]+)?\.weight$", name)
        if m and len(shape) == 2:
            out[f"{m.group(1)}.{m.group(2)}"] = shape[0] if m.group(2) == "A" else shape[1]
    return out


# adapter_config.json's lists that PEFT fills from a set: their order follows the run's PYTHONHASHSEED, so two
# identical trainings would write different bytes (and hash, and cache, as different adapters).
_SET_VALUED = ("target_modules", "exclude_modules")


def canonical_adapter_config(adapter_dir: str | os.PathLike) -> str:
    """The adapter's adapter_config.json as PEFT writes it (indent 2, sorted keys), its set-valued lists
    sorted: the same text for the same adapter, whatever order its file holds them in."""
    cfg = json.loads((Path(adapter_dir) / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
    cfg = {k: sorted(v) if k in _SET_VALUED and isinstance(v, list) and all(isinstance(x, str) for x in v) else v
           for k, v in cfg.items()}
    return json.dumps(cfg, indent=2, sort_keys=True)


def write_canonical_adapter_config(adapter_dir: str | os.PathLike) -> None:
    """Rewrite the adapter_config.json PEFT's save_pretrained wrote in its canonical form: a training's adapter
    directory is then the same bytes on every run."""
    (Path(adapter_dir) / ADAPTER_CONFIG_FILE).write_text(canonical_adapter_config(adapter_dir), encoding="utf-8")


def check_adapter_files(adapter_dir: str | os.PathLike) -> dict[str, Any]:
    """Raise AdapterError unless `adapter_dir` holds a loadable LoRA adapter as training writes it:
    adapter_config.json (an object with an integer r), complete weights whose LoRA ranks are those
    the config declares, and, when present, a readable automon_adapter.json of the same rank.
    Returns the parsed adapter_config.json."""
    d = Path(adapter_dir)
    cfg_file, weights = d / ADAPTER_CONFIG_FILE, d / WEIGHTS_FILE
    if not cfg_file.is_file() or not (weights.is_file() or (d / "adapter_model.bin").is_file()):
        have = ", ".join(sorted(p.name for p in d.iterdir())[:8]) if d.is_dir() else "nothing"
        raise AdapterError(f"{d} is not a complete PEFT LoRA adapter directory (it needs {ADAPTER_CONFIG_FILE} "
                           f"and {WEIGHTS_FILE}; it has {have or 'no files'})", str(d),
                           "pass the <run>/adapter directory written by train/sft.py, or " + _RETRAIN)
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        r = int(cfg["r"])
        pattern = {str(k): int(v) for k, v in (cfg.get("rank_pattern") or {}).items()}
    except (ValueError, OSError, TypeError, KeyError, AttributeError) as e:
        raise AdapterError(f"{ADAPTER_CONFIG_FILE} cannot be read as a LoRA config ({type(e).__name__}: {e})",
                           str(cfg_file), _RETRAIN) from None
    if weights.is_file():
        ranks = lora_ranks(safetensors_shapes(weights))
        allowed = {r, *pattern.values()}
        bad = {k: v for k, v in ranks.items() if v not in allowed or (not pattern and v != r)}
        if bad:
            k, v = next(iter(sorted(bad.items())))
            raise AdapterError(f"the LoRA weights have rank {v} ({k}) but {ADAPTER_CONFIG_FILE} says r={r}: the "
                               "weights and the config come from different trainings", str(weights), _RETRAIN)
        broken = nonfinite_tensors(weights)
        if broken:  # a diverged training: every sample would score alike (MR = FAR = 1.0)
            raise AdapterError(f"{WEIGHTS_FILE} holds inf or NaN in {len(broken)} tensor(s) (e.g. {broken[0]}): "
                               "its training diverged", str(weights),
                               "retrain it with a lower train.lr (train/sft.py ... overwrite=true)")
    if (d / ADAPTER_META_FILE).exists():
        meta = AdapterMeta.read(d)
        if not pattern and int(meta.lora_rank or r) != r:
            raise AdapterError(f"{ADAPTER_META_FILE} records lora_rank={meta.lora_rank} but {ADAPTER_CONFIG_FILE} "
                               f"says r={r}", str(d / ADAPTER_META_FILE), _RETRAIN)
    return cfg
