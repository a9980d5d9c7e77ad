#!/usr/bin/env bash
# Stop the cluster started by scripts/slurm-local-up.sh: cancel its jobs, then kill each daemon by
# the PID saved under $SLURM_LOCAL_DIR (default /tmp/slurm-local), only if /proc/PID/comm still
# names that daemon. Daemons the start script found already running have no PID file there and are
# left alone. Packages, /etc/slurm/*.conf, /var/lib/mysql and $SLURM_LOCAL_DIR stay in place;
# `rm -rf /tmp/slurm-local` after this gives a clean start (job ids from 1 again).
set -uo pipefail
D=${SLURM_LOCAL_DIR:-/tmp/slurm-local}

# stop_pids NAME ...: SIGTERM the PID in $D/NAME.pid when /proc/PID/comm is NAME, wait for all,
# SIGKILL what is left after 15 s, remove the PID files.
stop_pids() {
  local n f p pids=""
  for n in "$@"; do
    f="$D/$n.pid"
    [ -s "$f" ] || continue
    p=$(cat "$f")
    if kill -0 "$p" 2>/dev/null && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$n" ]; then
      kill "$p"; pids="$pids $p"
    fi
  done
  for _ in $(seq 150); do
    local left=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
    pids=$left; [ -z "$pids" ] && break; sleep 0.1
  done
  for p in $pids; do kill -9 "$p" 2>/dev/null; done
  for n in "$@"; do rm -f "$D/$n.pid"; done
}

# Jobs first (only when it is our controller that answers): slurmstepd and job processes outlive
# slurmd otherwise.
if [ -s "$D/slurmctld.pid" ] && command -v scontrol >/dev/null && scontrol ping 2>/dev/null | grep -q UP; then
  ids=$(squeue -h -o %i 2>/dev/null || true)
  if [ -n "$ids" ]; then
    scancel $ids 2>/dev/null || true
    for _ in $(seq 200); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi

stop_pids slurmd slurmctld slurmdbd
stop_pids mariadbd munged
echo "slurm-local: stopped (state kept in $D)"
