"""What a trained adapter records about how it was trained; evaluation checks it before scoring.

Training writes `<run>/adapter/automon_adapter.json`; evaluation refuses an adapter whose base model,
prompt (or prompt fit version) or thinking setting differ from the evaluation config unless
allow_mismatch=true.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

ADAPTER_META_FILE = "automon_adapter.json"


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
        d = json.loads(p.read_text())
        if "prompt_version" in d:  # files written before the prompt had one name; the value is that name
            d.setdefault("prompt", d.pop("prompt_version"))
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})
