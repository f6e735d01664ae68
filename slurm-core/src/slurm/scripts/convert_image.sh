# shellcheck shell=bash
# Converts a registry image to a .sqsh on the CPU partition, never on the GPU
# allocation: $1 partition, $2 minutes, $3 the .sqsh path, $4 the docker:// URI,
# $5 `force` to convert again although a whole image is there (a `:latest` asked
# anew), else `reuse`. One conversion per image at a time (a lock beside it): a
# submit that waited finds the image made and converts nothing. enroot writes to a
# temporary name on node-local temp paths (a folder of its own, never one an
# earlier job of the same id left behind), then the result is checked whole
# (sqsh_whole) and renamed; what an earlier conversion killed before it finished left
# is removed first. Prints `present` or `converted JOBID`; enroot's own lines go to
# stderr. Exit statuses: ConvertExit.
set -uo pipefail
part=$1 minutes=$2 out=$3 uri=$4 mode=$5
mkdir -p -- "$(dirname -- "$out")" || exit "$EXIT_CONVERT_FAILED"
exec 9>"$out.lock"
flock 9
if [ "$mode" != force ] && sqsh_whole "$out"; then echo present; exit 0; fi
# What a conversion killed before it finished left behind (its time limit counts the
# CPU partition's queue wait; a kill runs no trap): it held this lock, so none runs now.
rm -f -- "$out".tmp-* "$out".log-*
tmp="$out.tmp-$BASHPID"
log="$out.log-$BASHPID"
trap 'rm -f -- "$tmp" "$log"' EXIT
# shellcheck disable=SC2016 # the inner script expands its own variables on the node
srun --chdir=/tmp -n1 -c4 --mem=7200M -p "$part" -t "$minutes" --job-name=slurm-run-convert \
  bash -c 'echo "slurm-run-convert-job $SLURM_JOB_ID"
    if ! command -v enroot >/dev/null 2>&1; then
      echo "slurm-run-no-enroot on $(hostname)"; exit 127
    fi
    set -euo pipefail
    export TMPDIR=/tmp
    ENROOT_TEMP_PATH=$(mktemp -d "/tmp/enroot-slurm-run-$SLURM_JOB_ID.XXXXXX")
    export ENROOT_TEMP_PATH SLURM_ENROOT_TEMP_PATH="$ENROOT_TEMP_PATH"
    trap '\''rm -rf "$ENROOT_TEMP_PATH"'\'' EXIT
    cd /tmp
    enroot import -o "$1" "$2"' slurm-run-convert "$tmp" "$uri" >"$log" 2>&1
status=$?
job=$(sed -n 's/^slurm-run-convert-job \([0-9]*\).*/\1/p' "$log" | head -n 1)
grep -v '^slurm-run-convert-job ' "$log" >&2
if [ "$status" -ne 0 ]; then
  if [ -z "$job" ]; then exit "$EXIT_JOB_FAILED"; fi
  if grep -q '^slurm-run-no-enroot ' "$log"; then exit "$EXIT_NO_ENROOT"; fi
  # What enroot said (refused, unreachable, no such image, squashfs or disk) is read by
  # the caller from its lines on stderr.
  exit "$EXIT_CONVERT_FAILED"
fi
if ! sqsh_whole "$tmp"; then
  echo "the conversion (job $job) produced no whole squashfs image" >&2; exit "$EXIT_NOT_AN_IMAGE"
fi
mv -f -- "$tmp" "$out" || exit "$EXIT_CONVERT_FAILED"
echo "converted $job"
