# Shared settings and helpers of the test bed scripts (sourced, not run).
# The test bed is a real SLURM cluster (slurmctld, two slurmd, slurmdbd on MariaDB, munge)
# and a real OpenSSH server on 127.0.0.1, all started from Debian's packages, with every
# config, log, pid file and socket under one state folder.

# Several test beds can run side by side on one machine: each has its own state folder
# (SLURM_RUN_TESTBED_DIR), its ports shifted by SLURM_RUN_TESTBED_PORT_OFFSET, and its own
# job user (slurmrun, or slurmrun<offset>: the user's shell start-up names its cluster).
TB_DIR=${SLURM_RUN_TESTBED_DIR:-/var/tmp/slurm-run-testbed}
TB_PORT_OFFSET=${SLURM_RUN_TESTBED_PORT_OFFSET:-0}
case $TB_PORT_OFFSET in
  ''|*[!0-9]*) printf 'testbed: error: SLURM_RUN_TESTBED_PORT_OFFSET must be a number, e.g. 100\n' >&2; exit 1 ;;
esac
TB_USER=slurmrun
[ "$TB_PORT_OFFSET" -eq 0 ] || TB_USER="slurmrun$TB_PORT_OFFSET"
TB_CLUSTER=testbed
TB_SSH_PORT=$((22022 + TB_PORT_OFFSET))
TB_CTLD_PORT=$((16817 + TB_PORT_OFFSET))
TB_DBD_PORT=$((16819 + TB_PORT_OFFSET))
TB_DB_PORT=$((13306 + TB_PORT_OFFSET))
TB_NODE_PORTS=($((17001 + TB_PORT_OFFSET)) $((17002 + TB_PORT_OFFSET)))
TB_REGISTRY_PORT=$((15000 + TB_PORT_OFFSET))
TB_NODES=(n1 n2)
TB_GPU_PARTITION=gpu
TB_CPU_PARTITION=cpu_long
# A partition on the same nodes whose jobs a job of the others preempts (requeued).
TB_PREEMPT_PARTITION=preemptible
# The same, but a preempted job is cancelled (PreemptMode=CANCEL, as some clusters set).
TB_PREEMPT_CANCEL_PARTITION=preemptible_cancel
# Accounting, enforced (AccountingStorageEnforce): the login user's default account; an
# account where the user may run one job at a time (MaxJobs=1); a QOS with a 10-minute
# MaxWall the user may ask for (QOS normal stays the default).
TB_ACCOUNT=research
TB_LIMITED_ACCOUNT=limited
TB_SHORT_QOS=short
TB_SHARED="$TB_DIR/shared"
TB_RESULTS="$TB_SHARED/results"
TB_CONF="$TB_DIR/etc/slurm.conf"

# The Slurm release of the test bed: 22.05 is this host's own packages; 24.11 and 26.05
# run in a root filesystem of the Debian suite that has them (testbed/release.sh). A state
# folder holds one release, the one `up` wrote in it; a new one takes
# SLURM_RUN_TESTBED_SLURM (default 22.05).
TB_RELEASES=(22.05 24.11 26.05)
TB_RELEASE_FILE="$TB_DIR/release"
if [ -s "$TB_RELEASE_FILE" ]; then
  TB_SLURM=$(cat "$TB_RELEASE_FILE")
else
  TB_SLURM=${SLURM_RUN_TESTBED_SLURM:-22.05}
fi
case " ${TB_RELEASES[*]} " in
  *" $TB_SLURM "*) ;;
  *) printf 'testbed: error: SLURM_RUN_TESTBED_SLURM=%s: the test bed runs Slurm %s\n' "$TB_SLURM" "${TB_RELEASES[*]}" >&2; exit 1 ;;
esac

export SLURM_CONF="$TB_CONF"

log() { printf 'testbed: %s\n' "$*" >&2; }
die() { printf 'testbed: error: %s\n' "$*" >&2; exit 1; }

# pid_alive PIDFILE PATTERN: true when the pid file names a live process whose
# command line contains PATTERN (a stale or recycled pid is never trusted).
pid_alive() {
  local file=$1 pattern=$2 pid
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' < "$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$pattern"
}

# daemon_answers NAME PIDFILE LOG COMMAND...: the daemon just started (its stale pid file
# removed first) runs and answers COMMAND within a minute; else fail with the end of its
# log, at once when it was seen running and died. (Slurm's daemons fork into the
# background before they initialise their plugins: a daemon that dies then, as slurmd
# 24.11 does without a cgroup plugin, leaves a zero exit status behind it, and slurmd
# removes its pid file as it goes.)
daemon_answers() {
  local name=$1 pidfile=$2 logfile=$3 pattern=${1%% *} deadline=$(( $(date +%s) + 60 )) seen=
  shift 3
  until pid_alive "$pidfile" "$pattern" && "$@" >/dev/null 2>&1; do
    if pid_alive "$pidfile" "$pattern"; then
      seen=1
    elif [ -n "$seen" ] || { [ -s "$pidfile" ] && ! pid_alive "$pidfile" "$pattern"; }; then
      tail -n 5 "$logfile" >&2 2>/dev/null || true
      die "$name did not keep running (see $logfile)"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      tail -n 5 "$logfile" >&2 2>/dev/null || true
      pid_alive "$pidfile" "$pattern" && die "$name runs but does not answer after 60 s (see $logfile)"
      die "$name did not start (see $logfile)"
    fi
    sleep 0.2
  done
}

# wait_for DESCRIPTION SECONDS COMMAND...: poll COMMAND every 0.2 s until it succeeds or the deadline passes.
wait_for() {
  local what=$1 seconds=$2; shift 2
  local deadline=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "gave up waiting for $what after ${seconds}s"
      return 1
    fi
    sleep 0.2
  done
}

# stop_pidfile PIDFILE PATTERN: TERM the process, wait, then KILL; remove the pid file.
stop_pidfile() {
  local file=$1 pattern=$2 pid i
  if pid_alive "$file" "$pattern"; then
    pid=$(tr -dc '0-9' < "$file")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
      [ -d "/proc/$pid" ] || break
      sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$file"
}
