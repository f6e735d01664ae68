# shellcheck shell=bash
# The remote side of a submit, one round trip: check the datasets and the image,
# unpack the staged files (a tar archive on stdin whose entries are under
# `<job name>/`, so tar makes the job folder and its logs/), verify their
# checksums, then sbatch. $1 results root, $2 job name, $3 the attempt number,
# $4 how long sbatch may take (seconds), $5 the record's owner token (empty for a record
# from before owner tokens), $6 .sqsh image or empty, then the dataset paths. The exit
# statuses are named in the prelude (SubmitExit).
#
# The job folder is claimed for the record first (claim_folder): a folder another
# record of the same name claimed (another record store sharing this results root and
# SLURM user) is refused before anything of this record reaches it or sbatch.
#
# Each attempt claims its own folder `.sbatch-N` in the job folder before sbatch runs,
# and leaves sbatch's answer there (`out`, `err`, then `rc` last, written by bash in one
# write: a reader that finds `rc` empty reads it again). A settle that made the folder
# first (a fence, see settle.sh) stops the attempt before sbatch: so once the fence has
# run, no attempt it fenced can ever reach the scheduler, and every attempt that did has
# its answer on disk or is still bounded by the time limit.
#
# The processes it starts, each for what exactly once needs: `mkdir -p` (a new job
# folder), `tar` (the staged files), `sha256sum` (their checksums), `mkdir` (the fence,
# the one mechanism it shares with settle.sh) and `timeout` (sbatch's bound, which
# outlives this script). The claim, the checks and the answer kept are bash's own.
umask 077
root=$1 name=$2 attempt=$3 limit=$4 owner=$5 image=$6
shift 6
dir=$root/$name
fence=$dir/.sbatch-$attempt
[ -d "$dir" ] || mkdir -p -- "$dir" 2>/dev/null
if ! claim_folder "$dir" "$owner"; then
  echo "the job folder $dir belongs to another record named $name (another record store shares this results root and SLURM user); nothing was submitted" >&2
  cat >/dev/null; exit "$EXIT_CLAIMED"
fi
if [ -e "$fence" ]; then
  echo "attempt $attempt of $name was already made or fenced" >&2; cat >/dev/null; exit "$EXIT_FENCED"
fi
missing=
for p in "$@"; do [ -e "$p" ] || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "datasets missing on the cluster:$missing" >&2; cat >/dev/null; exit "$EXIT_DATASETS_MISSING"
fi
if [ -n "$image" ] && ! sqsh_whole "$image"; then
  echo "image $image is missing, truncated or not a squashfs file" >&2; cat >/dev/null; exit "$EXIT_IMAGE_MISSING"
fi
tar -x -m -C "$root" -f - || exit "$EXIT_UNPACK_FAILED"
cd -- "$dir" || exit "$EXIT_NO_JOB_FOLDER"
sha256sum --quiet --strict -c SHA256SUMS >&2 || exit "$EXIT_CHECKSUM_MISMATCH"
if ! mkdir -- "$fence" 2>/dev/null; then
  # Fenced while the files were unpacked: this attempt never reaches sbatch, and the
  # secrets it just unpacked do not stay behind.
  rm -f -- "env/job_$name.env"
  echo "attempt $attempt of $name was fenced" >&2; exit "$EXIT_FENCED"
fi
timeout -k 5 "$limit" sbatch --parsable --job-name="$name" "sbatch/job_$name.sbatch" >"$fence/out" 2>"$fence/err"
rc=$?
printf '%s\n' "$rc" >"$fence/rc"
# sbatch's answer, as it was kept (bash's builtins: no process started).
if [ -s "$fence/err" ]; then mapfile -t lines <"$fence/err"; printf '%s\n' "${lines[@]}" >&2; fi
if [ -s "$fence/out" ]; then mapfile -t lines <"$fence/out"; printf '%s\n' "${lines[@]}"; fi
exit "$rc"
