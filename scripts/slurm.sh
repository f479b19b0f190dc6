#!/usr/bin/env bash
# A one-host SLURM cluster for the SLURM tests (Debian's slurm-wlm and munge; run as root).
#   scripts/slurm.sh start   installs them if needed, starts munged (unless one runs), slurmctld and two
#                            slurmd, waits until both nodes are idle, prints the SLURM_CONF to export
#   scripts/slurm.sh stop    cancels this cluster's jobs and ends exactly the daemons `start` started
# Two partitions on this host: `cpu` (node cpu0, no GPUs) and `gpu` (node gpu0, two GPUs declared through
# gres with stand-in device files, so --gpus-per-task schedules and sets CUDA_VISIBLE_DEVICES without
# hardware). Each node has this machine's CPUs and memory; accounting storage is off, as on many small
# clusters. Everything lives in $CKPT_SWEEP_SLURM_DIR (default /var/tmp/ckpt-sweep-slurm).
set -euo pipefail
DIR=${CKPT_SWEEP_SLURM_DIR:-/var/tmp/ckpt-sweep-slurm}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
}

write_config() {
  local host cpus memory_mb
  host=$(hostname)
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc alone gives OMP_NUM_THREADS where set
  memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))  # slurmd reports a little under MemTotal
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/dev"
  # gres/gpu needs a character device per GPU: links to /dev/null and /dev/zero stand in for /dev/nvidia0-1.
  ln -sfn /dev/null "$DIR/dev/gpu0"
  ln -sfn /dev/zero "$DIR/dev/gpu1"
  cat >"$CONF" <<EOF
ClusterName=ckpt-sweep-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldPort=6817
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a task that asks no --mem is given the whole node's memory.
DefMemPerCPU=$(( memory_mb / cpus ))
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
GresTypes=gpu
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
KillWait=5
MinJobAge=300
NodeName=cpu0 NodeHostname=$host NodeAddr=127.0.0.1 Port=6818 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
NodeName=gpu0 NodeHostname=$host NodeAddr=127.0.0.1 Port=6819 CPUs=$cpus RealMemory=$memory_mb Gres=gpu:2 State=UNKNOWN
PartitionName=cpu Nodes=cpu0 Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=gpu0 MaxTime=INFINITE State=UP
EOF
  cat >"$DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=gpu0 Name=gpu File=$DIR/dev/gpu[0-1]
EOF
}

start_munge() {
  munge -n >/dev/null 2>&1 && return  # one runs already: use it, and leave it running at stop
  [ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || create-munge-key -f >/dev/null; chown munge:munge /etc/munge/munge.key; }
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
  echo /run/munge/munged.pid >>"$DIR/started"
}

wait_idle() {
  for _ in $(seq 60); do
    [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -c '^idle')" = 2 ] && return
    sleep 0.5
  done
  echo "slurm.sh: the nodes did not come up idle in 30 s:" >&2
  sinfo -N >&2 || true
  tail -n 5 "$DIR"/log/*.log >&2 || true
  return 1
}

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

case "${1:-}" in
  start)
    command -v slurmctld >/dev/null && command -v munged >/dev/null || install
    if running "$DIR/slurmctld.pid"; then
      wait_idle
      echo "$CONF"
      exit 0
    fi
    write_config
    : >"$DIR/started"
    start_munge
    slurmctld -f "$CONF" -i
    echo "$DIR/slurmctld.pid" >>"$DIR/started"
    for node in cpu0 gpu0; do
      slurmd -f "$CONF" -N "$node"
      echo "$DIR/slurmd-$node.pid" >>"$DIR/started"
    done
    wait_idle
    echo "$CONF"  # only this on stdout: callers capture it
    ;;
  stop)
    [ -f "$DIR/started" ] || exit 0
    if running "$DIR/slurmctld.pid"; then  # cancel this cluster's jobs and let their steps end first
      scancel --quiet --user=root 2>/dev/null || true
      for _ in $(seq 40); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
    fi
    tac "$DIR/started" | while read -r pidfile; do
      running "$pidfile" || continue
      pid=$(cat "$pidfile")
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
    done
    rm -f "$DIR/started"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
