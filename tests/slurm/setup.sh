#!/usr/bin/env bash
# A one-host Slurm cluster on this machine, for running BCL jobs under
# `srun --mpi=pmi2` (tools/tests/launch_pmi.rs).
#
#   tests/slurm/setup.sh         configure and start munged, slurmctld and
#                                slurmd; wait until the node is idle
#   tests/slurm/setup.sh stop    stop them (the configuration stays)
#   tests/slurm/setup.sh status  print the node's state; exit 0 if it is up
#
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/test installs them). Safe to rerun: a running cluster with the
# same configuration is left alone (prints "running", whether or not jobs
# run on it), otherwise the daemons are (re)started (prints "started");
# concurrent calls wait for each other.
#
# The configuration works without cgroups and without systemd (containers,
# gVisor): processes are tracked by parent (proctrack/linuxproc), tasks are
# not bound (task/none), no accounting. The node declares 4 CPUs whatever
# the machine has (SlurmdParameters=config_overrides) and its partition
# oversubscribes, so 4-task jobs run on 2 cores. Every daemon runs as root;
# state and logs live under /var/lib/bcl-slurm.
set -euo pipefail

base=/var/lib/bcl-slurm
conf_dir=/etc/slurm
conf=$conf_dir/slurm.conf
host=$(hostname -s)
cpus=4

die() { echo "tests/slurm/setup.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root"
for b in munged slurmctld slurmd sinfo srun scontrol; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
        die "$b is missing: apt-get install slurmctld slurmd slurm-client munge"
done
export PATH=$PATH:/usr/sbin

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

munge_pid=/run/munge/munged.pid

stop_all() {
    for f in "$base/slurmd.pid" "$base/slurmctld.pid" "$munge_pid"; do
        if pid_alive "$f"; then
            kill "$(cat "$f")" 2>/dev/null || true
            for _ in $(seq 100); do pid_alive "$f" || break; sleep 0.1; done
            pid_alive "$f" && kill -9 "$(cat "$f")" 2>/dev/null || true
        fi
        rm -f "$f"
    done
}

# The node's state as slurmctld sees it ("idle", "mixed", "down*", ...).
node_state() { timeout 10 sinfo -h -n "$host" -o %T 2>/dev/null || echo unknown; }
node_idle() { [ "$(node_state)" = idle ]; }
# Up: answering, and taking jobs or running them.
node_up() {
    case "$(node_state)" in idle|mixed|allocated|completing) return 0 ;; *) return 1 ;; esac
}

mkdir -p "$base"/{state,spool,log} "$conf_dir"
exec 9>"$base/lock"
flock 9

case "${1:-start}" in
    stop) stop_all; echo stopped; exit 0 ;;
    status) node_state; node_up; exit ;;
    start) ;;
    *) die "usage: $0 [start|stop|status]" ;;
esac

# munge: the Debian package made a key; make one if it did not.
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge

want=$(cat <<CONF
# Written by BCL's tests/slurm/setup.sh: a one-host cluster for tests.
ClusterName=bcl
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$base/state
SlurmdSpoolDir=$base/spool
SlurmctldPidFile=$base/slurmctld.pid
SlurmdPidFile=$base/slurmd.pid
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=bcl Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:$cpus
CONF
)

if [ "$(cat "$conf" 2>/dev/null || true)" = "$want" ] && pid_alive "$munge_pid" &&
    pid_alive "$base/slurmctld.pid" && pid_alive "$base/slurmd.pid" && node_up; then
    echo running
    exit 0
fi

# Never overwrite a configuration this script did not write (a real
# cluster's node).
if [ -s "$conf" ] && ! head -1 "$conf" | grep -q "^# Written by BCL's tests/slurm/setup.sh"; then
    die "$conf exists and is not ours: refusing to replace it"
fi
stop_all
printf '%s\n' "$want" > "$conf"

runuser -u munge -- munged 9>&- 2>"$base/log/munged.err" ||
    die "munged did not start: $(cat "$base/log/munged.err")"
munge -n | unmunge >/dev/null || die "munge does not work"

slurmctld -i 9>&- || die "slurmctld did not start: $(tail -5 "$base/log/slurmctld.log")"
slurmd 9>&- || die "slurmd did not start: $(tail -5 "$base/log/slurmd.log")"

for _ in $(seq 300); do
    if node_idle; then
        echo started
        exit 0
    fi
    sleep 0.2
done
echo "--- sinfo" >&2; sinfo -N -l >&2 || true
echo "--- slurmctld.log" >&2; tail -20 "$base/log/slurmctld.log" >&2 || true
echo "--- slurmd.log" >&2; tail -20 "$base/log/slurmd.log" >&2 || true
die "the node did not become idle within 60 s"
