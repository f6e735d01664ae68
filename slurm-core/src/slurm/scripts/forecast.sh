# shellcheck shell=bash
# Where a job would start, without submitting it: for each partition named in the
# parameters, `sbatch --test-only --partition=P` of that partition's batch script, framed
# as part N for the Nth partition (sbatch's answer is on its stderr). The scripts come on
# standard input, in the order of the partitions, each ended by a NUL byte. Times in UTC.
export TZ=UTC
n=0
for p in "$@"; do
  script=
  IFS= read -r -d '' script || [ -n "$script" ] || {
    part_empty "$n"
    n=$((n + 1))
    continue
  }
  printf '%s' "$script" >"$frame_dir/script.$n"
  part "$n" sbatch --test-only --partition="$p" "$frame_dir/script.$n"
  n=$((n + 1))
done
exit 0
