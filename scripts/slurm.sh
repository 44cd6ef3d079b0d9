#!/usr/bin/env bash
# A single-node SLURM on this machine for the SLURM integration tests:
# munge + slurmctld + slurmd started by hand (no systemd, no cgroups), with
# job-completion records in a text file instead of slurmdbd.
#
#   bash scripts/slurm.sh up     install if needed, configure, start, wait for the node
#   bash scripts/slurm.sh down   stop the daemons this script started (by pid)
#   bash scripts/slurm.sh check  exit 0 if the cluster answers and the node is up
#
# Needs root (it installs Debian packages and writes /etc/slurm).
set -euo pipefail

STATE=${SLUICE_SLURM_STATE:-/var/tmp/sluice-slurm}
CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

running() { [ -s "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

node_state() { sinfo -h -N -o '%t' 2>/dev/null | head -1 || true; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
     && command -v sbatch >/dev/null; then
    return
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
}

start_munge() {
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  if ! running munged; then
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid --force
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$STATE/munged.pid"
  fi
  munge -n | unmunge >/dev/null
}

# Two partitions on the one node: `debug` (the default, where sluice's
# arrays run) and `urgent`, a higher tier whose jobs preempt debug's
# (PreemptMode=CANCEL: the preempted task ends PREEMPTED, as on a cluster
# with a preemptible queue), so retries on preemption are tested for real.
configure() {
  mkdir -p /etc/slurm "$STATE"/{ctld,d,log}
  cat > "$CONF" <<CONF
ClusterName=sluice
SlurmctldHost=${NODE}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=1
MinJobAge=600
DefMemPerCPU=512
MaxArraySize=10001
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${MEM_MB} State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1
PartitionName=urgent Nodes=${NODE} MaxTime=INFINITE State=UP PriorityTier=10
CONF
}

up() {
  mkdir -p "$STATE"
  install
  start_munge
  configure
  running slurmctld || slurmctld -i
  running slurmd || slurmd
  for _ in $(seq 100); do [ -s "$STATE/slurmctld.pid" ] && [ -s "$STATE/slurmd.pid" ] && break; sleep 0.1; done
  for _ in $(seq 60); do
    st=$(node_state)
    case "$st" in
      idle|mix|alloc) break ;;
      down*|drain*) scontrol update nodename="$NODE" state=resume || true ;;
    esac
    sleep 1
  done
  # A node that is running jobs (mix/alloc) is up: jobs left by an earlier run
  # on this machine share it (OverSubscribe) and the tests' jobs still start.
  # Give such jobs a moment to drain so the tests start on a quiet node.
  for _ in $(seq 30); do [ "$(node_state)" = idle ] && break; sleep 1; done
  sinfo
  squeue -h 2>/dev/null | head -5 || true
  case "$(node_state)" in
    idle|mix|alloc) ;;
    *) echo "slurm node not usable: $(node_state)" >&2
       tail -n 20 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2
       exit 1 ;;
  esac
}

down() {
  for d in slurmd slurmctld munged; do
    if running "$d"; then
      pid=$(cat "$STATE/$d.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$STATE/$d.pid"
  done
}

check() { command -v sbatch >/dev/null && [ -n "$(node_state)" ]; }

case "${1:-up}" in
  up) up ;;
  down) down ;;
  check) check ;;
  *) echo "usage: $0 up|down|check" >&2; exit 2 ;;
esac
