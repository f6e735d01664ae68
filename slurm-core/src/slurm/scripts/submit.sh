# shellcheck shell=bash
# The remote side of a submit, one round trip: check the datasets and the image,
# unpack the staged files (a tar archive on stdin whose entries are under
# `<job name>/`, so tar makes the job folder and its logs/), verify their
# checksums, then sbatch. $1 results root, $2 job name, $3 .sqsh image or empty,
# then the dataset paths. The exit statuses are named in the prelude (SubmitExit).
umask 077
root=$1 name=$2 image=$3
shift 3
missing=
for p in "$@"; do [ -e "$p" ] || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "datasets missing on the cluster:$missing" >&2; cat >/dev/null; exit "$EXIT_DATASETS_MISSING"
fi
if [ -n "$image" ] && ! sqsh_whole "$image"; then
  echo "image $image is missing, truncated or not a squashfs file" >&2; cat >/dev/null; exit "$EXIT_IMAGE_MISSING"
fi
tar -x -m -C "$root" -f - || exit "$EXIT_UNPACK_FAILED"
cd -- "$root/$name" || exit "$EXIT_NO_JOB_FOLDER"
sha256sum --quiet --strict -c SHA256SUMS >&2 || exit "$EXIT_CHECKSUM_MISMATCH"
exec sbatch --parsable --job-name="$name" "sbatch/job_$name.sbatch"
