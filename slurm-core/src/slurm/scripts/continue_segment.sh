# shellcheck shell=bash
# A resumable job Slurm has just requeued: $1 its job id, $2 its segments file.
# Slurm holds a requeued job back until its old credential expires (BeginTime = the
# requeue + the credential lifetime, 121 s by default); its owner may move the begin time
# earlier, so it is set a few seconds after now (past the revoke of the old run's
# credential). Prints the segments file's last line (how the segment ended, the
# checkpoint it left), or nothing.
scontrol update JobId="$1" StartTime=now+5 >/dev/null 2>&1 ||
  echo "slurm-run: could not move the begin time of job $1 forward" >&2
[ -r "$2" ] && tail -n 1 -- "$2"
exit 0
