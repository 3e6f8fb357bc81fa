#!/usr/bin/env bash
# The project's test cluster: Debian's Slurm 22.05 (slurmctld, 4 x slurmd with 8 fake GPUs each,
# slurmdbd on MariaDB for sacct) and PostgreSQL, all on loopback in one private directory.
#
#   scripts/testcluster.sh install   apt packages (root; ~45 s once)
#   scripts/testcluster.sh start     bring everything up, print the environment to use
#   scripts/testcluster.sh stop      stop every daemon it started (by PID file)
#   scripts/testcluster.sh env       print SLURM_CONF / LUCIDD_TEST_PG_URL lines for `eval`
#   scripts/testcluster.sh status    sinfo of the running cluster
#
# Partitions are the ones docs/deploy.md asks for: `inbox` (Default, State=DOWN: jobs wait there
# until lucidd moves them), `profiling` (MaxTime=INFINITE, lucidd enforces Tprof), and two VCs,
# `main` (all nodes) and `research` (gpu[3-4]). job_submit.lua is the project's own
# (lucidd/data/slurm/job_submit.lua). Everything stays on 127.0.0.1 with non-default ports.
#
# Environment (all optional; the defaults are the test cluster the tests use):
#   LUCIDD_TC_DIR=/tmp/lucidd-testcluster   where everything lives (config, state, logs, databases)
#   LUCIDD_TC_NODES=4                       fake nodes gpu[1-N], 8 GPUs each
#   LUCIDD_TC_PORT_BASE=P                   run beside another copy: slurmctld P, slurmdbd P+2,
#                                           slurmd P+4.., MariaDB P+90, PostgreSQL P+91
#                                           (unset: 16817/16819/16821../16306/16432)
#   LUCIDD_TC_LUA=0                         no JobSubmitPlugins (jobs stay in the partition asked
#                                           for, main by default; bench/slurm_replay.py uses this)
#   LUCIDD_TC_SCHED_PARAMS=...              SchedulerParameters (default bf_interval=2)
#   LUCIDD_TC_EXTRA='Epilog=/bin/true'      more slurm.conf lines (';'-separated), appended
#   LUCIDD_TC_SHARDS=0                      plain untyped GPUs (`Gres=gpu:8`); by default each GPU has
#                                           its own Type (g0..g7) and 2 shards, the GRES layout lucidd's
#                                           live packing needs (docs/deploy.md, "GPU packing")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${LUCIDD_TC_DIR:-/tmp/lucidd-testcluster}
NODES=${LUCIDD_TC_NODES:-4}
GPUS=8
CTLD_PORT=16817; DBD_PORT=16819; SLURMD_PORT0=16821; MYSQL_PORT=16306; PG_PORT=16432
if [ -n "${LUCIDD_TC_PORT_BASE:-}" ]; then
  P=$LUCIDD_TC_PORT_BASE
  CTLD_PORT=$P; DBD_PORT=$((P + 2)); SLURMD_PORT0=$((P + 4)); MYSQL_PORT=$((P + 90)); PG_PORT=$((P + 91))
fi
LUA=${LUCIDD_TC_LUA:-1}
# plain Slurm (no job_submit.lua): a job without -p goes to main, not to the DOWN inbox for ever
if [ "$LUA" = 0 ]; then INBOX_DEFAULT=NO; MAIN_DEFAULT=YES; else INBOX_DEFAULT=YES; MAIN_DEFAULT=NO; fi
SCHED_PARAMS=${LUCIDD_TC_SCHED_PARAMS:-bf_interval=2}
EXTRA=${LUCIDD_TC_EXTRA:-}
SHARDS=${LUCIDD_TC_SHARDS:-1}
# GPU packing's layout (docs/deploy.md): one Type per GPU index, so gpu and shard jobs exclude each
# other per GPU, and 2 shards per GPU. Users' untyped --gres=gpu:N still gets N whole GPUs.
if [ "$SHARDS" = 1 ]; then
  GRES_TYPES=gpu,shard
  NODE_GRES=$(for i in $(seq 0 $((GPUS - 1))); do printf 'gpu:g%d:1,' "$i"; done; \
              for i in $(seq 0 $((GPUS - 1))); do printf 'shard:g%d:2,' "$i"; done)
  NODE_GRES=${NODE_GRES%,}
  TRES=gres/gpu,gres/shard
else
  GRES_TYPES=gpu; NODE_GRES=gpu:$GPUS; TRES=gres/gpu
fi
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd slurm-wlm-mysql-plugin mariadb-server postgresql lua5.1)

log() { echo "testcluster: $*" >&2; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then log "need root to install: ${missing[*]}"; exit 1; fi
  log "installing ${missing[*]}"
  # Debian starts services on install; this machine has no init to start them, and the test
  # cluster runs its own instances anyway.
  local prc=/usr/sbin/policy-rc.d had_prc=0
  [ -e $prc ] && had_prc=1
  [ $had_prc = 1 ] || { printf '#!/bin/sh\nexit 101\n' > $prc; chmod +x $prc; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  [ $had_prc = 1 ] || rm -f $prc
}

nodelist() { echo "gpu[1-$NODES]"; }

write_configs() {
  mkdir -p "$DIR"/{etc,state,log,run,dev,munge,spool}
  for i in $(seq 0 $((GPUS - 1))); do [ -e "$DIR/dev/nvidia$i" ] || mknod "$DIR/dev/nvidia$i" c 1 3; done
  local last_port=$((SLURMD_PORT0 + NODES - 1))
  cat > "$DIR/etc/slurm.conf" <<EOF
ClusterName=lucidtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT0
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=$SCHED_PARAMS
DefMemPerCPU=1000
MaxJobCount=50000
MaxArraySize=50001
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=$GRES_TYPES
$([ "$LUA" = 0 ] && echo "#JobSubmitPlugins=lua (LUCIDD_TC_LUA=0)" || echo "JobSubmitPlugins=lua")
JobFileAppend=1
JobRequeue=1
MinJobAge=300
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityMaxAge=7-0
PriorityWeightFairshare=0
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$DIR/munge/munge.socket
AccountingStorageTRES=$TRES
JobAcctGatherType=jobacct_gather/none
NodeName=$(nodelist) NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$SLURMD_PORT0-$last_port] CPUs=32 RealMemory=64000 Gres=$NODE_GRES State=UNKNOWN
PartitionName=inbox     Nodes=$(nodelist) Default=$INBOX_DEFAULT MaxTime=INFINITE State=DOWN
PartitionName=profiling Nodes=$(nodelist) Default=NO  MaxTime=INFINITE State=UP PriorityTier=2
PartitionName=main      Nodes=$(nodelist) Default=$MAIN_DEFAULT MaxTime=INFINITE State=UP
PartitionName=research  Nodes=gpu[$((NODES > 2 ? NODES - 1 : 1))-$NODES] Default=NO MaxTime=INFINITE State=UP
EOF
  [ -z "$EXTRA" ] || tr ';' '\n' <<<"$EXTRA" >> "$DIR/etc/slurm.conf"
  echo "AutoDetect=off" > "$DIR/etc/gres.conf"
  if [ "$SHARDS" = 1 ]; then
    for i in $(seq 0 $((GPUS - 1))); do
      echo "NodeName=$(nodelist) Name=gpu Type=g$i File=$DIR/dev/nvidia$i" >> "$DIR/etc/gres.conf"
      echo "NodeName=$(nodelist) Name=shard Type=g$i Count=2 File=$DIR/dev/nvidia$i" >> "$DIR/etc/gres.conf"
    done
  else
    echo "NodeName=$(nodelist) Name=gpu File=$DIR/dev/nvidia[0-$((GPUS - 1))]" >> "$DIR/etc/gres.conf"
  fi
  cp "$ROOT/lucidd/data/slurm/job_submit.lua" "$DIR/etc/job_submit.lua"
  cat > "$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
CommunicationParameters=NoInAddrAny
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=slurm
StoragePass=slurmtest
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "timed out after ${t}s waiting for $what"; return 1
}

start_mariadb() {
  local d="$DIR/mysql"
  if [ ! -d "$d/mysql" ]; then
    mkdir -p "$d"; chown mysql:mysql "$d" 2>/dev/null || true
    mariadb-install-db --user=mysql --datadir="$d" --auth-root-authentication-method=socket >"$DIR/log/mysql-install.log" 2>&1
  fi
  mkdir -p "$DIR/run/mysqld"; chown mysql:mysql "$DIR/run/mysqld" 2>/dev/null || true
  # no log flush per commit (test data): slurmdbd's writes keep pace with slurmctld on a slow disk
  mariadbd --user=mysql --datadir="$d" --bind-address=127.0.0.1 --port=$MYSQL_PORT \
    --socket="$DIR/run/mysqld/mysqld.sock" --pid-file="$DIR/run/mysqld/mysqld.pid" \
    --log-error="$DIR/log/mysqld.log" --skip-name-resolve --innodb-buffer-pool-size=64M \
    --innodb-flush-log-at-trx-commit=0 >/dev/null 2>&1 &
  wait_for 30 MariaDB mariadb --socket="$DIR/run/mysqld/mysqld.sock" -e 'select 1'
  # a fresh controller restarts job ids at 1: accounting from an earlier start would mix old jobs
  # into `sacct -j` of new ones with the same ids
  mariadb --socket="$DIR/run/mysqld/mysqld.sock" -e "DROP DATABASE IF EXISTS slurm_acct_db;"
  mariadb --socket="$DIR/run/mysqld/mysqld.sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmtest'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
}

start_postgres() {
  local d="$DIR/pg" bin
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  if [ ! -f "$d/PG_VERSION" ]; then
    mkdir -p "$d"; chown postgres:postgres "$d"; chmod 700 "$d"
    runuser -u postgres -- "$bin/initdb" -D "$d" -A trust -U postgres >"$DIR/log/pg-init.log" 2>&1
  fi
  mkdir -p "$DIR/run/pg"; chown postgres:postgres "$DIR/run/pg"
  # a lock file left by a machine session that ended (its PID may belong to anything by now)
  if [ -f "$d/postmaster.pid" ] && ! runuser -u postgres -- "$bin/pg_ctl" -D "$d" status >/dev/null 2>&1; then
    rm -f "$d/postmaster.pid"
  fi
  runuser -u postgres -- "$bin/pg_ctl" -D "$d" -l "$d/postgres.log" -w -t 30 \
    -o "-p $PG_PORT -k $DIR/run/pg -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  runuser -u postgres -- "$bin/psql" -h 127.0.0.1 -p $PG_PORT -U postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='lucidd'" | grep -q 1 || \
    runuser -u postgres -- "$bin/createdb" -h 127.0.0.1 -p $PG_PORT -U postgres lucidd
}

export_env() {
  echo "export SLURM_CONF=$DIR/etc/slurm.conf"
  echo "export LUCIDD_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/lucidd"
  echo "export LUCIDD_TC_DIR=$DIR"
}

start() {
  install_packages
  stop >/dev/null 2>&1 || true
  rm -rf "$DIR/state" "$DIR"/spool/slurmd-*  # a fresh controller: no job of an earlier run comes back
  write_configs
  export SLURM_CONF=$DIR/etc/slurm.conf
  # munge
  chmod 755 "$DIR/munge"
  [ -f "$DIR/munge/munge.key" ] || { mungekey -c -f -k "$DIR/munge/munge.key" 2>/dev/null || \
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 2>/dev/null; }
  chmod 600 "$DIR/munge/munge.key"
  munged --force --socket "$DIR/munge/munge.socket" --key-file "$DIR/munge/munge.key" \
    --pid-file "$DIR/run/munged.pid" --log-file "$DIR/log/munged.log" --seed-file "$DIR/munge/seed"
  start_mariadb
  start_postgres
  slurmdbd 2>>"$DIR/log/slurmdbd.err"
  wait_for 30 slurmdbd bash -c "exec 3<>/dev/tcp/127.0.0.1/$DBD_PORT"
  sacctmgr -i add cluster lucidtest >/dev/null 2>&1 || true
  sacctmgr -i add account research Cluster=lucidtest >/dev/null 2>&1 || true
  sacctmgr -i add user root Account=research >/dev/null 2>&1 || true
  sacctmgr -i add user nobody Account=research >/dev/null 2>&1 || true
  slurmctld -f "$SLURM_CONF" 2>>"$DIR/log/slurmctld.err"
  wait_for 30 slurmctld scontrol ping
  for i in $(seq 1 "$NODES"); do slurmd -f "$SLURM_CONF" -N "gpu$i" 2>>"$DIR/log/slurmd.err"; done
  wait_for 60 "idle nodes" bash -c "[ \"\$(sinfo -h -p main -t idle -o '%D')\" = $NODES ]"
  log "up: $NODES nodes x $GPUS GPUs, partitions inbox(DOWN)/profiling/main/research; logs in $DIR/log"
  export_env
}

kill_pidfile() {  # kill_pidfile FILE [NAME [WAIT_S]]: only a live process whose command name matches NAME
  local f=$1 name=${2:-} wait_s=${3:-5}
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f" 2>/dev/null || true)
  # a stale PID file from an earlier machine session may name an unrelated process by now
  if [ -n "$name" ] && [ -n "$pid" ] && ! grep -q "$name" "/proc/$pid/comm" 2>/dev/null; then
    rm -f "$f"; return 0
  fi
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq $((wait_s * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop() {
  for f in "$DIR"/run/slurmd-*.pid; do [ -e "$f" ] && kill_pidfile "$f" slurmd; done
  kill_pidfile "$DIR/run/slurmctld.pid" slurmctld 30
  kill_pidfile "$DIR/run/slurmdbd.pid" slurmdbd
  kill_pidfile "$DIR/run/mysqld/mysqld.pid" mariadbd
  if [ -f "$DIR/pg/postmaster.pid" ]; then
    local bin; bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    runuser -u postgres -- "$bin/pg_ctl" -D "$DIR/pg" -m fast -w stop >/dev/null 2>&1 || true
  fi
  kill_pidfile "$DIR/run/munged.pid" munged
  # Job steps of the fake nodes (sleep jobs) would otherwise outlive the cluster. Only this
  # copy's: a step daemon works in its slurmd's directory (under $DIR), and a copy running beside
  # this one (LUCIDD_TC_PORT_BASE) keeps its jobs.
  local p
  for p in $(pgrep -f "slurmstepd: \[" 2>/dev/null || true); do
    case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in
      "$DIR"|"$DIR"/*) kill "$p" 2>/dev/null || true ;;
    esac
  done
  log "stopped"
}

start_ctld() {
  export SLURM_CONF=$DIR/etc/slurm.conf
  slurmctld -f "$SLURM_CONF" 2>>"$DIR/log/slurmctld.err"
  wait_for 30 slurmctld scontrol ping
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1; }

case "${1:-}" in
  install) install_packages ;;
  # 30 s: a loaded slurmctld saves its job state on SIGTERM; killed mid-save it would restart with
  # jobs rolled back and their ids reused
  ctld-stop) kill_pidfile "$DIR/run/slurmctld.pid" slurmctld 30 ;;     # for the restart tests
  ctld-start) start_ctld ;;
  pg-stop) runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$DIR/pg" -m fast -w stop >/dev/null ;;
  pg-start) runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$DIR/pg" -l "$DIR/pg/postgres.log" -w -t 30 \
    -o "-p $PG_PORT -k $DIR/run/pg -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null ;;
  start) start ;;
  stop) stop ;;
  env) export_env ;;
  status) SLURM_CONF=$DIR/etc/slurm.conf sinfo ;;
  reset) stop; rm -rf "$DIR"; log "removed $DIR" ;;
  *) echo "usage: $0 install|start|stop|env|status|reset|ctld-stop|ctld-start|pg-stop|pg-start" >&2; exit 2 ;;
esac
