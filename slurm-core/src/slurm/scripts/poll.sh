# shellcheck shell=bash
# One poll of one cluster, two framed parts: 0 squeue, 1 sacct.
# $1 every job id (comma list), $2 the ids whose records are RUNNING, $3 the SLURM
# states squeue may show a live job in (space list, from the Rust state table), then
# the squeue argv, the word --slurm-run-next--, and the sacct argv without --jobs.
# squeue answers for every job; sacct, the slower accounting query, is asked only for
# the jobs squeue cannot settle: those it no longer lists or lists in a finished state
# (exit code, steps), and RUNNING records it shows pending again (why: a requeue). A
# poll of jobs that are all pending or running costs one squeue and no sacct.
all=$1 running=$2 live=$3
shift 3
squeue_argv=()
while [ $# -gt 0 ] && [ "$1" != "--slurm-run-next--" ]; do squeue_argv+=("$1"); shift; done
[ $# -gt 0 ] && shift
sacct_argv=("$@")
part 0 "${squeue_argv[@]}"
squeue_status=$?
need=$all
if [ "$squeue_status" -eq 0 ]; then
  need=$(awk -F'|' -v all="$all" -v running="$running" -v live="$live" '
    BEGIN {
      n = split(live, l, " "); for (i = 1; i <= n; i++) alive[l[i]] = 1
      n = split(running, r, ","); for (i = 1; i <= n; i++) run[r[i]] = 1
    }
    { state[$1] = $2 }
    END {
      n = split(all, a, ","); out = ""
      for (i = 1; i <= n; i++) {
        id = a[i]; s = (id in state) ? state[id] : ""
        if (!(s in alive) || ((id in run) && (s == "PENDING" || s ~ /^REQUEUE/))) out = out (out == "" ? "" : ",") id
      }
      print out
    }' "$frame_dir/0.out")
fi
if [ -n "$need" ]; then
  part 1 "${sacct_argv[@]}" --jobs="$need"
else
  part 1 true
fi
exit 0
