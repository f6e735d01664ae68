# shellcheck shell=bash
# One poll of one cluster, two framed parts: 0 squeue, 1 sacct.
# $1 every job id (comma list; an array job once), $2 the id-column keys whose records
# or tasks are RUNNING (77, 123_4), $3 the SLURM states squeue may show a live job in
# (space list, from the Rust state table), $4 the array tasks not yet ended (123_4),
# then the squeue argv, the word --slurm-run-next--, and the sacct argv without --jobs.
# squeue answers for every job; sacct, the slower accounting query, is asked only for
# the jobs squeue cannot settle: those it no longer lists or lists in a finished state
# (exit code, steps), RUNNING ones it shows pending again or no longer lists (a
# requeue, an end), and arrays with a task it lists neither alone nor in a pending
# range. A poll of jobs that are all pending or running costs one squeue and no sacct.
all=$1 running=$2 live=$3 expected=$4
shift 4
squeue_argv=()
while [ $# -gt 0 ] && [ "$1" != "--slurm-run-next--" ]; do squeue_argv+=("$1"); shift; done
[ $# -gt 0 ] && shift
sacct_argv=("$@")
part 0 "${squeue_argv[@]}"
squeue_status=$?
need=$all
if [ "$squeue_status" -eq 0 ]; then
  need=$(awk -F'|' -v all="$all" -v running="$running" -v live="$live" -v expected="$expected" '
    function job_of(key) { sub(/_.*/, "", key); return key }
    BEGIN {
      n = split(live, l, " "); for (i = 1; i <= n; i++) alive[l[i]] = 1
    }
    {
      key = $1; job = job_of(key); seen[job] = 1; state[key] = $2
      if (key ~ /_\[/) ranged[job] = 1
      if (!($2 in alive)) need[job] = 1
    }
    END {
      n = split(running, r, ",")
      for (i = 1; i <= n; i++) {
        key = r[i]; job = job_of(key); s = (key in state) ? state[key] : ""
        if (s == "" || s == "PENDING" || s ~ /^REQUEUE/) need[job] = 1
      }
      n = split(expected, e, ",")
      for (i = 1; i <= n; i++) {
        key = e[i]; job = job_of(key)
        if (!(key in state) && !(job in ranged)) need[job] = 1
      }
      n = split(all, a, ","); out = ""
      for (i = 1; i <= n; i++) {
        id = a[i]
        if (!(id in seen) || (id in need)) out = out (out == "" ? "" : ",") id
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
