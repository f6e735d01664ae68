# shellcheck shell=bash
# The command of a conversion job (a batch job of its own on the CPU partition, which
# the GPU job waits for with --dependency=afterok): converts a registry image to a
# .sqsh, never on the GPU allocation. It runs in the job's step on a CPU node; what to
# convert comes in its environment: SLURM_RUN_CONVERT_URI (docker://...),
# SLURM_RUN_CONVERT_OUT (the .sqsh), SLURM_RUN_CONVERT_MODE (`force` converts again
# although a whole image is there, a `:latest` asked anew; else `reuse`). One
# conversion per image at a time (a lock beside it): a job that waited finds the image
# made and converts nothing. enroot writes to a temporary name on node-local temp paths
# (a folder of its own), the result is checked whole (sqsh_whole) and renamed; what a
# conversion killed before it finished left is removed first. Each outcome is told by
# a `slurm-run-conversion: WORD` line (present, converted, not-an-image, enroot-failed)
# or `slurm-run-no-enroot`, beside enroot's own lines (main.err), which the client reads
# when the job did not complete.
set -uo pipefail
out=$SLURM_RUN_CONVERT_OUT uri=$SLURM_RUN_CONVERT_URI mode=$SLURM_RUN_CONVERT_MODE
if ! mkdir -p -- "$(dirname -- "$out")"; then
  echo "slurm-run-conversion: no-images-folder: $(dirname -- "$out") could not be made" >&2; exit 1
fi
exec 9>"$out.lock"
flock 9
if [ "$mode" != force ] && sqsh_whole "$out"; then echo "slurm-run-conversion: present"; exit 0; fi
# What a conversion killed before it finished (its time limit, a cancel) left behind: it
# held this lock, so none runs now.
rm -f -- "$out".tmp-* "$out".log-*
if ! command -v enroot >/dev/null 2>&1; then
  echo "slurm-run-no-enroot on $(hostname)" >&2; exit 1
fi
tmp=$out.tmp-${SLURM_JOB_ID:-$BASHPID}
export TMPDIR=/tmp
ENROOT_TEMP_PATH=$(mktemp -d "/tmp/enroot-slurm-run-${SLURM_JOB_ID:-$BASHPID}.XXXXXX") || exit 1
export ENROOT_TEMP_PATH SLURM_ENROOT_TEMP_PATH=$ENROOT_TEMP_PATH
trap 'rm -f -- "$tmp"; rm -rf -- "$ENROOT_TEMP_PATH"' EXIT
cd /tmp || exit 1
if ! enroot import -o "$tmp" "$uri"; then
  echo "slurm-run-conversion: enroot-failed" >&2; exit 1
fi
if ! sqsh_whole "$tmp"; then
  echo "slurm-run-conversion: not-an-image: the conversion produced no whole squashfs image" >&2; exit 1
fi
mv -f -- "$tmp" "$out" || exit 1
echo "slurm-run-conversion: converted"
