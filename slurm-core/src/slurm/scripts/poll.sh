# shellcheck shell=bash
# One poll of one or more clusters, two framed parts per cluster: 2K squeue, 2K+1 sacct.
# What to ask comes on standard input, so a poll of any number of jobs fits (nothing
# travels as an argument, and each tool is asked about at most 2000 ids per run): lists
# headed by a line `K KIND COUNT` and followed by COUNT lines, for the cluster's group K:
# KIND `J` the jobs to ask about (an array job once), `R` the id-column keys (77, 123_4)
# whose record or task is RUNNING, `E` the array tasks not yet ended. $1 the SLURM
# states squeue may show a live job in (space list, from the Rust state table), $2 what
# writes the lists into their files (`bash` or `awk`, as for the deciders), then per
# group how to ask squeue (`ids`: the explicit id lists; `mine`: squeue lists the user's
# own jobs, kept here when tracked: cheaper for many ids), what decides which jobs need
# sacct (`bash`: its builtins, no process started, for a few jobs; `awk`: one awk,
# faster on long lists), the squeue argv, the word
# --slurm-run-next--, the sacct argv without --jobs, and the word --slurm-run-group--
# before the next group.
# $3 the memo of a poll repeated with the same lists (`-`: none; see below).
# squeue answers for every job; sacct, the slower accounting query, is asked only for
# the jobs squeue cannot settle: those it no longer lists or lists in a finished state
# (exit code, steps), RUNNING ones it shows pending again or no longer lists (a requeue,
# an end), and arrays with a task it lists neither alone nor in a pending range. A poll
# of jobs that are all pending or running costs one squeue and no sacct. Bash's
# builtins do the rest, so the poll costs little more than the tools it runs.
# Times in UTC (sacct's are read as such into the records' timelines).
export TZ=UTC
live=$1 lists_by=$2 memo=$3
shift 3
# The groups' words, each group's from group_from[K] (its how, its decider, its squeue
# argv, --slurm-run-next--, its sacct argv).
words=("$@")
group_from=()
i=0
while [ "$i" -lt "${#words[@]}" ]; do
  group_from+=("$i")
  while [ "$i" -lt "${#words[@]}" ] && [ "${words[i]}" != "--slurm-run-group--" ]; do i=$((i + 1)); done
  i=$((i + 1))
done
# group K: group K's words into how, decider, squeue_argv and sacct_argv.
group() {
  local i=${group_from[$1]}
  how=${words[i]} decider=${words[i + 1]} squeue_argv=() sacct_argv=()
  i=$((i + 2))
  while [ "$i" -lt "${#words[@]}" ] && [ "${words[i]}" != "--slurm-run-next--" ]; do squeue_argv+=("${words[i]}"); i=$((i + 1)); done
  i=$((i + 1))
  while [ "$i" -lt "${#words[@]}" ] && [ "${words[i]}" != "--slurm-run-group--" ]; do sacct_argv+=("${words[i]}"); i=$((i + 1)); done
}
# The memo: `CLIENT:HELD:WRITE:LISTS`, for a client that polls the same jobs again and
# again (a watch); LISTS names the lists of its request (a digest the client made). When
# every group asks for the user's own jobs, the lists are kept in
# "$keep_dir/poll.CLIENT.KIND.K" (`LISTS` in "$keep_dir/poll.CLIENT.lists" once they are
# whole) and squeue's rows of group K in "$keep_dir/poll.CLIENT.WRITE.K": the long-lived
# shell's private folder, which outlives this command and goes with the shell. A request
# whose HELD is `-` brings its lists on standard input. One that names the slot HELD (the
# client's last quiet poll, of the same lists) brings none: when the lists kept are not
# LISTS (a new shell), the answer is the one line `@@memo lost` and the client asks
# again with its lists. When the rows HELD kept are the same byte for byte as squeue's
# now, the answer is the one line `@@memo same` and nothing else runs: the client already
# holds what the rest would tell. Otherwise the poll goes on with the rows just read and
# the lists kept, and its answer ends with `@@memo kept WRITE` when squeue answered every
# group and no job needed sacct (the client may hold WRITE from now on), or
# `@@memo none`. WRITE is never the slot the client holds.
memo_asked=$memo memo_end=none lists_at=$frame_dir/
if [ "$memo" != - ]; then
  IFS=: read -r memo_client memo_held memo_write memo_lists <<<"$memo"
  keep=${keep_dir:-}
  case $memo_client:$memo_held:$memo_write:$memo_lists in
    *[!0-9a-z:-]*) keep= ;;
  esac
  for i in "${group_from[@]}"; do
    if [ "${words[i]}" != mine ]; then keep=; fi
  done
  if [ -z "$keep" ] || [ -z "$memo_client" ] || [ -z "$memo_write" ] || [ -z "$memo_lists" ] ||
    [ "$memo_held" = "$memo_write" ]; then
    if [ "$memo_held" != - ]; then
      echo "@@memo lost"
      exit 0
    fi
    memo=-
  else
    lists_at=$keep/poll.$memo_client.
    if [ "$memo_held" != - ]; then
      kept_lists=
      if [ -f "${lists_at}lists" ]; then read -r kept_lists <"${lists_at}lists"; fi
      if [ "$kept_lists" != "$memo_lists" ]; then
        echo "@@memo lost"
        exit 0
      fi
    fi
    same=1
    rows_rc=()
    for k in "${!group_from[@]}"; do
      group "$k"
      "${squeue_argv[@]}" </dev/null >"$keep/poll.$memo_client.$memo_write.$k" 2>"$frame_dir/rows.$k.err"
      rows_rc+=("$?")
      if [ "${rows_rc[k]}" -ne 0 ] || [ -s "$frame_dir/rows.$k.err" ] || [ "$memo_held" = - ] ||
        ! cmp -s "$keep/poll.$memo_client.$memo_write.$k" "$keep/poll.$memo_client.$memo_held.$k"; then
        same=0
      fi
    done
    if [ "$same" = 1 ]; then
      echo "@@memo same"
      exit 0
    fi
    memo_end="kept $memo_write"
  fi
fi
# The lists into their files (${lists_at}KIND.K): by bash's builtins for a short input
# (no process started), by one awk for a long one (bash's printf writes a line at a
# time: 20 ms for 10,000 ids here, against 8 ms for the awk). Both stop at a header
# that is not `K KIND COUNT`. A request that holds a slot brings no lists: those kept
# are its lists. Lists kept are emptied first (they outlive the command), and named
# LISTS once whole.
if [ "$memo" != - ] && [ "$memo_held" = - ]; then
  : >"${lists_at}lists"
  for k in "${!group_from[@]}"; do : >"${lists_at}J.$k" && : >"${lists_at}R.$k" && : >"${lists_at}E.$k"; done
fi
if [ "$memo" != - ] && [ "$memo_held" != - ]; then
  :
elif [ "$lists_by" = awk ]; then
  # The folder travels in the environment: `-v` would read backslashes as escapes.
  SR_LISTS_AT=$lists_at awk '
    BEGIN { at = ENVIRON["SR_LISTS_AT"] }
    left == 0 {
      if (NF != 3 || $3 !~ /^[0-9]+$/) exit
      left = $3; file = at $2 "." $1
      next
    }
    { print > file; left-- }'
else
  mapfile -t input
  i=0
  while [ "$i" -lt "${#input[@]}" ]; do
    header=${input[i]} count=${input[i]##* }
    case $count in '' | *[!0-9]*) break ;; esac
    k=${header%% *} kind=${header#* } kind=${kind%% *}
    # Joined, then written at once (see `framed`).
    if [ "$count" -gt 0 ]; then
      printf -v list '%s\n' "${input[@]:i+1:count}"
      printf '%s' "$list" >>"$lists_at$kind.$k"
    fi
    i=$((i + 1 + count))
  done
fi
if [ "$memo" != - ] && [ "$memo_held" = - ]; then printf '%s\n' "$memo_lists" >"${lists_at}lists"; fi
# needs_sacct RUN EXPECTED ROWS JOBS: the jobs of JOBS that sacct must settle, into the
# array `needed`, with bash's builtins; the same decision as the awk program below.
needs_sacct() {
  local -A alive=() state=() seen=() ranged=() need=()
  local word key job s rest
  for word in $live; do alive[$word]=1; done
  while IFS='|' read -r key s rest; do
    [ -n "$key" ] || continue
    job=${key%%_*}
    seen[$job]=1 state[$key]=$s
    case $key in *_\[*) ranged[$job]=1 ;; esac
    if [ -z "$s" ] || [ -z "${alive[$s]:-}" ]; then need[$job]=1; fi
  done <"$3"
  while IFS= read -r key; do
    [ -n "$key" ] || continue
    case ${state[$key]:-} in '' | PENDING | REQUEUE*) need[${key%%_*}]=1 ;; esac
  done <"$1"
  while IFS= read -r key; do
    [ -n "$key" ] || continue
    job=${key%%_*}
    if [ -z "${state[$key]+set}" ] && [ -z "${ranged[$job]:-}" ]; then need[$job]=1; fi
  done <"$2"
  while IFS= read -r job; do
    [ -n "$job" ] || continue
    if [ -z "${seen[$job]:-}" ] || [ -n "${need[$job]:-}" ]; then needed+=("$job"); fi
  done <"$4"
}
# shellcheck disable=SC2317 # runs through `part`
# chunked FILE CMD ARGS...: CMD ARGS --jobs=ID,ID,... for every 2000 ids of FILE; the
# first failure's status.
chunked() {
  local file=$1 rc=0 i ids IFS=,
  shift
  mapfile -t ids <"$file"
  for ((i = 0; i < ${#ids[@]}; i += 2000)); do
    "$@" --jobs="${ids[*]:i:2000}" || rc=$?
  done
  return "$rc"
}
# shellcheck disable=SC2317 # runs through `part`
# mine FILE CMD ARGS...: CMD ARGS (squeue of the user's own jobs), keeping the rows of the
# jobs in FILE; squeue's status.
mine() {
  local file=$1
  shift
  "$@" | tracked "$file" -
  return "${PIPESTATUS[0]}"
}
# shellcheck disable=SC2317 # runs through `part`
# tracked FILE ROWS: the rows of ROWS (`-`: standard input) of the jobs in FILE.
tracked() {
  awk -F'|' 'NR == FNR { want[$1] = 1; next } { job = $1; sub(/_.*/, "", job); if (job in want) print }' "$1" "$2"
}
# shellcheck disable=SC2317 # runs through `part`
# memo_rows FILE K: the rows of the jobs in FILE of the squeue the memo step ran for
# group K, its errors and its status, as `mine` would have answered them.
memo_rows() {
  local lines
  tracked "$1" "$keep/poll.$memo_client.$memo_write.$2"
  if [ -s "$frame_dir/rows.$2.err" ]; then
    mapfile -t lines <"$frame_dir/rows.$2.err"
    printf '%s\n' "${lines[@]}" >&2
  fi
  return "${rows_rc[$2]}"
}
for k in "${!group_from[@]}"; do
  group "$k"
  all=${lists_at}J.$k run=${lists_at}R.$k expected=${lists_at}E.$k need=$frame_dir/need.$k
  # A list the input did not give is empty: read from /dev/null rather than made (a file
  # made costs more here than the rest of a poll's own work on a few jobs).
  [ -e "$all" ] || all=/dev/null
  [ -e "$run" ] || run=/dev/null
  [ -e "$expected" ] || expected=/dev/null
  if [ "$memo" != - ]; then
    part $((2 * k)) memo_rows "$all" "$k"
  elif [ "$how" = mine ]; then
    part $((2 * k)) mine "$all" "${squeue_argv[@]}"
  else
    part $((2 * k)) chunked "$all" "${squeue_argv[@]}"
  fi
  squeue_status=$?
  if [ "$squeue_status" -eq 0 ] && [ "$decider" = bash ]; then
    # The jobs that need sacct, written only when there are some.
    needed=()
    needs_sacct "$run" "$expected" "$frame_dir/$((2 * k)).out" "$all"
    if [ "${#needed[@]}" -gt 0 ]; then
      printf -v list '%s\n' "${needed[@]}"
      printf '%s' "$list" >"$need"
    else
      need=/dev/null
    fi
  elif [ "$squeue_status" -eq 0 ]; then
    awk -F'|' -v live="$live" -v runf="$run" -v expf="$expected" -v outf="$frame_dir/$((2 * k)).out" '
      function job_of(key) { sub(/_.*/, "", key); return key }
      function settle(  key, job, s) {
        for (key in running) {
          job = job_of(key); s = (key in state) ? state[key] : ""
          if (s == "" || s == "PENDING" || s ~ /^REQUEUE/) need[job] = 1
        }
        for (key in expected) {
          job = job_of(key)
          if (!(key in state) && !(job in ranged)) need[job] = 1
        }
        settled = 1
      }
      BEGIN { n = split(live, l, " "); for (i = 1; i <= n; i++) alive[l[i]] = 1 }
      FILENAME == runf { running[$1] = 1; next }
      FILENAME == expf { expected[$1] = 1; next }
      FILENAME == outf {
        key = $1; job = job_of(key); seen[job] = 1; state[key] = $2
        if (key ~ /_\[/) ranged[job] = 1
        if (!($2 in alive)) need[job] = 1
        next
      }
      {
        if (!settled) settle()
        if (!($1 in seen) || ($1 in need)) print $1
      }' "$run" "$expected" "$frame_dir/$((2 * k)).out" "$all" >"$need"
  else
    need=$all
  fi
  if [ "$squeue_status" -ne 0 ]; then memo_end=none; fi
  if [ -s "$need" ]; then
    memo_end=none
    part $((2 * k + 1)) chunked "$need" "${sacct_argv[@]}"
  else
    part_empty $((2 * k + 1))
  fi
done
if [ "$memo_asked" != - ]; then echo "@@memo $memo_end"; fi
exit 0
