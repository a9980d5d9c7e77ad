#!/usr/bin/env bash
# Start a single-node Slurm cluster on loopback, as root, without systemd (CI and local testing).
#   bash scripts/slurm-local-up.sh          # install (Debian bookworm packages) + start; idempotent
#   bash scripts/slurm-local-down.sh        # stop what this script started
# Recipe and measurements: shared/docs/slurm-local.md. Partition `debug`, cluster `localci`.
# Env: SLURM_LOCAL_DIR (default /tmp/slurm-local: state, spool, logs, PID files),
#      SLURM_LOCAL_ACCOUNTING (1 = slurmdbd + MariaDB so that sacct, and submitit's job states, work;
#      0 = no accounting: fewer packages, but submitit then never sees a killed job as finished),
#      SLURM_LOCAL_APT_UPDATE (0 = skip `apt-get update` when the package lists are known fresh).
# Every daemon this script starts gets a PID file under $SLURM_LOCAL_DIR; the stop script kills
# exactly those PIDs (checked against /proc/PID/comm) and nothing else: a munged or MariaDB that
# was already running before is used as it is and left alone.
set -euo pipefail
D=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
ACCT=${SLURM_LOCAL_ACCOUNTING:-1}
H=$(hostname -s)
NCPU=$(nproc)
MEM=$(( $(awk '/^MemTotal:/{print $2}' /proc/meminfo) / 1024 - 1024 ))   # MiB, 1 GiB below the machine

if [ "$(id -u)" != 0 ]; then
  echo "slurm-local-up.sh runs as root (it installs packages and starts daemons); try: sudo bash $0" >&2
  exit 2
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
  echo "slurm-local-up.sh needs a Debian/Ubuntu machine (apt-get); on a real cluster use its own Slurm" >&2
  exit 2
fi

# alive PIDFILE COMM: true if the PID in PIDFILE runs and its /proc/PID/comm is COMM
alive() { local p; [ -s "$1" ] || return 1; p=$(cat "$1"); kill -0 "$p" 2>/dev/null && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$2" ]; }
# wait_for SECONDS CMD...: retry CMD every 0.2 s
wait_for() { local n=$(( $1 * 5 )); shift; until "$@" >/dev/null 2>&1; do n=$((n-1)); [ "$n" -gt 0 ] || { echo "timeout: $*" >&2; return 1; }; sleep 0.2; done; }
# own NAME SRC_PIDFILE: record a daemon we just started under $D (what the stop script kills)
own() { local n=0; until [ -s "$2" ]; do n=$((n+1)); [ "$n" -lt 100 ] || { echo "no PID file $2" >&2; return 1; }; sleep 0.1; done
        [ "$2" = "$D/$1.pid" ] || cp "$2" "$D/$1.pid"; }

# 1. packages (Debian bookworm: Slurm 22.05.8, munge 0.5.15, MariaDB 10.11)
pkgs="slurmctld slurmd slurm-client munge"
[ "$ACCT" = 1 ] && pkgs="$pkgs slurmdbd mariadb-server"
missing=""
for p in $pkgs; do
  [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" = "ii " ] || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  [ "${SLURM_LOCAL_APT_UPDATE:-1}" = 1 ] && apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

mkdir -p "$D/state" "$D/spool" "$D/log"

# 2. config (rewritten only when it changes; slurm daemons are restarted then)
cat > "$D/slurm.conf.new" <<EOF
ClusterName=localci
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
ReturnToService=2
KillWait=5
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
NodeName=$H NodeAddr=127.0.0.1 CPUs=$NCPU RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
if [ "$ACCT" = 1 ]; then
  printf '%s\n' AccountingStorageType=accounting_storage/slurmdbd AccountingStorageHost=localhost \
    AccountingStoragePort=6819 >> "$D/slurm.conf.new"
else
  echo AccountingStorageType=accounting_storage/none >> "$D/slurm.conf.new"
fi
if ! cmp -s "$D/slurm.conf.new" /etc/slurm/slurm.conf; then
  for n in slurmd slurmctld; do
    if alive "$D/$n.pid" "$n"; then p=$(cat "$D/$n.pid"); kill "$p"
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done; fi
  done
  mkdir -p /etc/slurm
  mv "$D/slurm.conf.new" /etc/slurm/slurm.conf
else
  rm -f "$D/slurm.conf.new"
fi

# 3. munge: key (normally made by the package), run dir, daemon as user munge
if [ ! -s /etc/munge/munge.key ]; then
  runuser -u munge -- mungekey --create
fi
install -d -o munge -g munge -m 0755 /run/munge
if ! alive /run/munge/munged.pid munged; then
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged          # forks; writes /run/munge/munged.pid
  own munged /run/munge/munged.pid
fi
wait_for 10 sh -c 'munge -n | unmunge'

# 4. accounting: MariaDB (unix socket only) + slurmdbd
if [ "$ACCT" = 1 ]; then
  install -d -o mysql -g root -m 0755 /run/mysqld
  if ! alive /run/mysqld/mysqld.pid mariadbd; then
    rm -f /run/mysqld/mysqld.pid
    setsid /usr/sbin/mariadbd --user=mysql --skip-networking --pid-file=/run/mysqld/mysqld.pid \
      >> "$D/log/mariadb.log" 2>&1 < /dev/null &
    wait_for 30 mariadb-admin ping
    own mariadbd /run/mysqld/mysqld.pid
  fi
  wait_for 30 mariadb-admin ping
  mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmci';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  cat > "$D/slurmdbd.conf.new" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmci
StorageLoc=slurm_acct_db
LogFile=$D/log/slurmdbd.log
PidFile=$D/slurmdbd.pid
EOF
  install -m 0600 "$D/slurmdbd.conf.new" /etc/slurm/slurmdbd.conf && rm -f "$D/slurmdbd.conf.new"
  if ! alive "$D/slurmdbd.pid" slurmdbd; then
    slurmdbd                                     # forks; writes $D/slurmdbd.pid
  fi
  wait_for 30 sacctmgr -n list cluster
fi

# 5. controller, then node daemon (both write their PID files under $D themselves)
if ! alive "$D/slurmctld.pid" slurmctld; then
  slurmctld                                      # forks; recovers state from $D/state if any
fi
wait_for 30 sh -c 'scontrol ping | grep -q UP'
if ! alive "$D/slurmd.pid" slurmd; then
  slurmd                                         # forks; node name = hostname -s
fi
# wait until the node is usable; a node left drained/down/invalid in the saved state is resumed
ok=0
for _ in $(seq 150); do
  case "$(sinfo -h -n "$H" -o %T 2>/dev/null | head -n1)" in
    idle|mixed|allocated|completing) ok=1; break ;;
    drain*|down|inval*) scontrol update NodeName="$H" State=RESUME 2>/dev/null || true ;;
  esac
  sleep 0.2
done
[ "$ok" = 1 ] || { echo "node $H not usable:" >&2; sinfo -R >&2; exit 1; }
sinfo
