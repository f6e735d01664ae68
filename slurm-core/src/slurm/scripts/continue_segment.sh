# shellcheck shell=bash
# A resumable job Slurm has just requeued: $1 its job id, $2 its segments file.
# Slurm holds a requeued job back until its old credential expires (BeginTime = the
# requeue + the credential lifetime, 121 s by default); its owner may move the begin time
# earlier, so after a segment that ended at the wall it is set a few seconds after now
# (past the revoke of the old run's credential). After a preemption Slurm's hold stands:
# the preemptor takes the nodes first, and a run started again within the preemption's
# grace period is preempted once more, without a warning (seen on Slurm 24.11). Prints the
# segments file's last line (how the segment ended, the checkpoint it left), or nothing.
last=
[ -r "$2" ] && last=$(tail -n 1 -- "$2")
IFS=$'\t' read -r _ how _ <<<"$last" || true
if [ "${how:-}" != preemption ]; then
  scontrol update JobId="$1" StartTime=now+5 >/dev/null 2>&1 ||
    echo "slurm-run: could not move the begin time of job $1 forward" >&2
fi
[ -z "$last" ] || printf '%s\n' "$last"
exit 0
