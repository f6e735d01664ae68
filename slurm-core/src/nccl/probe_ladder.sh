# The NCCL probe's knob ladder (slurm-run). The probe job's batch script runs it on the
# job's first node (the rendezvous node), outside the container, as
#   bash -c LADDER slurm-run-probe JOB_FOLDER
# with `slurm_run_step COMMAND` exported by the batch script: one step running COMMAND
# on every node of the allocation, in the job's container. Each rung is one such step,
# under its own timeout, with the rung's knobs and a fresh rendezvous port; the first
# rung whose all-reduce passes ends the ladder. Everything happens in this one
# allocation: no client waits between rungs.
#
# Written to JOB_FOLDER/nccl/ (read by slurm-run when it sees the probe end, and by the
# jobs that waited for it):
#   rung-<i>.out  the rung's output, every node
#   verdict       `env <i> NAME=VALUE` for each knob of a rung, `rung <i> OUTCOME detail`
#                 for each rung tried (OK, BAD, HUNG or FAILED), then `end OUTCOME <i>`
#   knobs.env     the passing rung's knobs, `NAME=VALUE` lines
# Exit status 0 when a rung passed, 3 otherwise (the jobs waiting on it never start).
#
# Environment (from the probe's spec):
#   SLURM_RUN_NCCL_PROBE_CMD         the command every node runs on every rung (under its
#                                    own timeout; it prints NCCL_PROBE_TIMEOUT when that
#                                    fired, NCCL_PROBE_EXIT when it failed, and exits 0)
#   SLURM_RUN_NCCL_PROBE_TIMEOUT     seconds one rung's command may take
#   SLURM_RUN_NCCL_PROBE_STEP_TIMEOUT  seconds after which the ladder stops the step itself
#   SLURM_RUN_NCCL_PROBE_KILL_AFTER  seconds between timeout's TERM and its KILL
#   SLURM_RUN_NCCL_PROBE_RUNGS       how many rungs
#   SLURM_RUN_NCCL_PROBE_RUNG_<i>    rung i's knobs, `NAME=VALUE` lines (names checked
#                                    by slurm-run; values hold no newline)
set -uo pipefail

dir="$1/nccl"
mkdir -p -- "$dir"
verdict="$dir/verdict"
: >"$verdict"
rm -f -- "$dir/knobs.env"
timeout_secs=${SLURM_RUN_NCCL_PROBE_TIMEOUT:?}
step_secs=${SLURM_RUN_NCCL_PROBE_STEP_TIMEOUT:?}
kill_after=${SLURM_RUN_NCCL_PROBE_KILL_AFTER:-10}
rungs=${SLURM_RUN_NCCL_PROBE_RUNGS:?}

# A TCP port no socket of this node uses (torchrun's store listens here, on the first
# node): several probes may share a node, and a port of a killed rung lingers.
free_port() {
  local port hex tries=0
  while :; do
    port=$((20000 + RANDOM % 30000))
    hex=$(printf ':%04X ' "$port")
    tries=$((tries + 1))
    if [ "$tries" -ge 50 ] || ! grep -qs -- "$hex" /proc/net/tcp /proc/net/tcp6; then
      printf '%s\n' "$port"
      return 0
    fi
  done
}

# One line: no newlines or carriage returns, at most 400 characters.
one_line() {
  tr '\r\n' '  ' | cut -c1-400
}

for ((i = 0; i < rungs; i++)); do
  var="SLURM_RUN_NCCL_PROBE_RUNG_$i"
  knobs=${!var-}
  shown=""
  while IFS= read -r knob; do
    [ -n "$knob" ] || continue
    printf 'env %s %s\n' "$i" "$knob" >>"$verdict"
    shown="$shown${shown:+ }$knob"
  done <<<"$knobs"
  port=$(free_port)
  out="$dir/rung-$i.out"
  printf 'slurm-run: NCCL probe rung %s of %s: knobs {%s}, port %s, timeout %ss\n' \
    "$((i + 1))" "$rungs" "$shown" "$port" "$timeout_secs"
  (
    while IFS= read -r knob; do
      [ -n "$knob" ] && export "${knob?}"
    done <<<"$knobs"
    export MASTER_PORT="$port"
    # shellcheck disable=SC2016 # "$1" is expanded by the inner bash
    exec timeout --kill-after="$kill_after" "$step_secs" \
      bash -c 'slurm_run_step "$1"' slurm-run-rung "$SLURM_RUN_NCCL_PROBE_CMD"
  ) 2>&1 | tee -- "$out"
  rc=${PIPESTATUS[0]}
  if line=$(grep -a -m1 -- NCCL_PROBE_BAD "$out"); then
    outcome=BAD
    detail=$(printf '%s' "$line" | one_line)
  elif line=$(grep -a -m1 -- NCCL_PROBE_OK "$out"); then
    outcome=OK
    detail=$(printf '%s' "$line" | one_line)
  elif line=$(grep -a -m1 -- NCCL_PROBE_TIMEOUT "$out"); then
    outcome=HUNG
    detail=$(printf '%s' "$line" | one_line)
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    outcome=HUNG
    detail="the rung's step did not end within ${step_secs}s (timeout exit $rc)"
  elif line=$(grep -a -m1 -- NCCL_PROBE_EXIT "$out"); then
    outcome=FAILED
    detail=$(printf '%s' "$line" | one_line)
  else
    outcome=FAILED
    detail="the rung's step exited $rc without a verdict: $(tail -n 4 -- "$out" | one_line)"
  fi
  printf 'rung %s %s %s\n' "$i" "$outcome" "$detail" >>"$verdict"
  printf 'slurm-run: NCCL probe rung %s: %s %s\n' "$((i + 1))" "$outcome" "$detail"
  case $outcome in
    OK)
      printf '%s\n' "$knobs" | grep -v '^$' >"$dir/knobs.env.partial"
      mv -f -- "$dir/knobs.env.partial" "$dir/knobs.env"
      printf 'end OK %s\n' "$i" >>"$verdict"
      exit 0
      ;;
    HUNG) ;;
    *)
      printf 'end %s %s\n' "$outcome" "$i" >>"$verdict"
      exit 3
      ;;
  esac
done
printf 'end HUNG %s\n' "$((rungs - 1))" >>"$verdict"
exit 3
