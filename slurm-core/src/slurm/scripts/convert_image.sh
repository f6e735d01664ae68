# shellcheck shell=bash
# Converts a registry image to a .sqsh once, on the CPU partition, never on the GPU
# allocation: $1 partition, $2 minutes, $3 the .sqsh path, $4 the docker:// URI.
# Writes under a temporary name and renames, so a partial file is never mistaken for
# an image; a result without the squashfs magic is refused.
set -euo pipefail
part=$1 minutes=$2 out=$3 uri=$4
mkdir -p -- "$(dirname -- "$out")"
if [ "$(head -c 4 -- "$out" 2>/dev/null)" = hsqs ]; then exit 0; fi
tmp="$out.tmp-$$"
rm -f -- "$tmp"
# shellcheck disable=SC2016 # the inner script expands its own variables on the node
srun --chdir=/tmp -n1 -c4 --mem=7200M -p "$part" -t "$minutes" --job-name=slurm-run-convert \
  bash -c 'set -euo pipefail
    export TMPDIR=/tmp ENROOT_TEMP_PATH="/tmp/enroot-slurm-run-$SLURM_JOB_ID"
    export SLURM_ENROOT_TEMP_PATH="$ENROOT_TEMP_PATH"
    mkdir -p "$ENROOT_TEMP_PATH"
    cd /tmp
    enroot import -o "$1" "$2"' slurm-run-convert "$tmp" "$uri" >&2
if [ "$(head -c 4 -- "$tmp" 2>/dev/null)" != hsqs ]; then
  rm -f -- "$tmp"; echo "the conversion produced no squashfs image" >&2; exit 1
fi
mv -f -- "$tmp" "$out"
