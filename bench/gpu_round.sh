#!/bin/bash
# The one prepared GPU round (bench/gpu_round.py): on a lent machine, one device call with carry [".whl"];
# here, --dry-run [--check] shows and checks the plan. Runs from the repo root, with $PYTHON if set, else
# the project's .venv where there is one (here), else python3 (the lent machine's, which has torch).
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && py=.venv/bin/python
exec "$py" bench/gpu_round.py "$@"
