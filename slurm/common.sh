# Sourced by the slurm/*.sbatch templates: find the checkout, activate its environment, print a
# summary. Not a job script itself. Variables (all optional):
#   AUTOMON_DIR    the automon checkout (default: the directory sbatch was called from)
#   VENV           its virtual environment (default: $AUTOMON_DIR/.venv; "none" = use the PATH as is)
#   AUTOMON_SETUP  shell lines run first, e.g. "module load cuda/12.4; export HF_HOME=/scratch/hf"
die() { echo "error: $*" >&2; exit 2; }
AUTOMON_DIR=${AUTOMON_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}
[ -f "$AUTOMON_DIR/train/sft.py" ] || die "AUTOMON_DIR=$AUTOMON_DIR is not an automon checkout: run sbatch from the repository root, or export AUTOMON_DIR=/path/to/automon"
cd "$AUTOMON_DIR"
if [ -n "${AUTOMON_SETUP:-}" ]; then eval "$AUTOMON_SETUP"; fi
VENV=${VENV:-$AUTOMON_DIR/.venv}
if [ "$VENV" != none ]; then
  [ -f "$VENV/bin/activate" ] || die "no virtual environment at $VENV: run scripts/setup.sh (AUTOMON_EXTRAS=dev,gpu-train,gpu-eval on GPU nodes), or set VENV=none to use the python on the PATH"
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
export TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1
# Defaults shared by the templates (the paper's sweep); override any of them in the environment.
BUILD=${BUILD:-data/builds/default}
RUNS=${RUNS:-runs/sweep}
MODEL=${MODEL:-qwen3_4b_instruct_2507}
PROMPT=${PROMPT:-direct_v1}
# SUBSETS: one training run per word; default every registered subset (automon.subsets), then all.
# A function, called where a template needs the list, so a template that does not (one SUBSET=...
# run) neither runs Python nor fails on a missing environment.
default_subsets() {
  if [ -z "${SUBSETS:-}" ]; then
    SUBSETS="$(python -m automon.subsets names) all" || die "python -m automon.subsets names failed: is automon installed (VENV=$VENV)?"
  fi
}
job_summary() {
  echo "== ${SLURM_JOB_NAME:-automon} job ${SLURM_JOB_ID:-none}${SLURM_ARRAY_TASK_ID:+ (array ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID})}" \
       "on $(hostname -s), restart ${SLURM_RESTART_COUNT:-0}, $(date '+%F %T')"
  echo "   dir $AUTOMON_DIR, python $(command -v python), build $BUILD, runs $RUNS, model $MODEL, prompt $PROMPT"
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>/dev/null | sed 's/^/   /' || true; fi
}
