# shellcheck shell=bash
# Continue a resumable run as a fresh job, once: Slurm refused to requeue it (its
# script exited with the refused status) or holds it (MaxBatchRequeue, JOB_GETENV_FAILED).
# $1 the job folder, $2 its staged batch script, $3 its segments file, $4 the old job,
# $5 the restart count the fresh job starts at. Prints the segments file's last line,
# a line `--`, then sbatch's answer; the answer of an earlier run of this script for the
# same count when there was one (a lost answer submits nothing twice), nothing when
# that run is still under way.
dir=$1 script=$2 segments=$3 old=$4 base=$5
line=
if [ -r "$segments" ]; then line=$(tail -n 1 -- "$segments"); fi
printf '%s\n--\n' "$line"
mkdir -p -- "$dir/resume" || exit "$EXIT_FAILED"
marker="$dir/resume/fresh-$base"
if ! (set -o noclobber; : >"$marker") 2>/dev/null; then
  cat -- "$marker"
  exit 0
fi
# A held job would never run again: it goes, the fresh job takes its place.
scancel -- "$old" 2>/dev/null || true
if ! answer=$(cd -- "$dir" && sbatch --parsable --export=ALL,SLURM_RUN_RESTART_BASE="$base" -- "$script"); then
  rm -f -- "$marker"
  exit "$EXIT_FAILED"
fi
printf '%s\n' "$answer" >"$marker"
printf '%s\n' "$answer"
exit 0
