# shellcheck shell=bash
# One poll of one or more clusters, two framed parts per cluster: 2K squeue, 2K+1 sacct.
# The job ids come on standard input, one a line, `K ID R` (K the cluster's group, R 1
# when the record is RUNNING), so a poll of any number of jobs fits: they never travel
# as arguments, and each tool is asked about at most 2000 ids per run. $1 the SLURM
# states squeue may show a live job in (space list, from the Rust state table), then per
# group the squeue argv, the word --slurm-run-next--, the sacct argv without --jobs, and
# the word --slurm-run-group-- before the next group.
# squeue answers for every job; sacct, the slower accounting query, is asked only for
# the jobs squeue cannot settle: those it no longer lists or lists in a finished state
# (exit code, steps), and RUNNING records it shows pending again (why: a requeue). A
# poll of jobs that are all pending or running costs one squeue and no sacct.
live=$1
shift
awk -v dir="$frame_dir" '{ print $2 > (dir "/all." $1); if ($3 == 1) print $2 > (dir "/run." $1) }'
# shellcheck disable=SC2317 # runs through `part`
# chunked FILE CMD ARGS...: CMD ARGS --jobs=ID,ID,... for every 2000 ids of FILE; the
# first failure's status.
chunked() {
  local file=$1 rc=0 chunk
  shift
  while IFS= read -r chunk; do
    "$@" --jobs="$chunk" || rc=$?
  done < <(awk '{ printf "%s%s", (NR % 2000 == 1 ? "" : ","), $0; if (NR % 2000 == 0) printf "\n" } END { if (NR % 2000) printf "\n" }' "$file")
  return "$rc"
}
k=0
while [ $# -gt 0 ]; do
  squeue_argv=()
  sacct_argv=()
  while [ $# -gt 0 ] && [ "$1" != "--slurm-run-next--" ]; do squeue_argv+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  while [ $# -gt 0 ] && [ "$1" != "--slurm-run-group--" ]; do sacct_argv+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  all=$frame_dir/all.$k run=$frame_dir/run.$k need=$frame_dir/need.$k
  touch -- "$all" "$run"
  part $((2 * k)) chunked "$all" "${squeue_argv[@]}"
  squeue_status=$?
  if [ "$squeue_status" -eq 0 ]; then
    awk -F'|' -v live="$live" -v runf="$run" -v outf="$frame_dir/$((2 * k)).out" '
      BEGIN { n = split(live, l, " "); for (i = 1; i <= n; i++) alive[l[i]] = 1 }
      FILENAME == runf { run[$1] = 1; next }
      FILENAME == outf { state[$1] = $2; next }
      {
        id = $1; s = (id in state) ? state[id] : ""
        if (!(s in alive) || ((id in run) && (s == "PENDING" || s ~ /^REQUEUE/))) print id
      }' "$run" "$frame_dir/$((2 * k)).out" "$all" >"$need"
  else
    cp -- "$all" "$need"
  fi
  if [ -s "$need" ]; then
    part $((2 * k + 1)) chunked "$need" "${sacct_argv[@]}"
  else
    part $((2 * k + 1)) true
  fi
  k=$((k + 1))
done
exit 0
