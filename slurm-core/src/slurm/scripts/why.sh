# shellcheck shell=bash
# Why jobs wait, in one round trip, framed (times in UTC):
#   part 0: squeue of the jobs (their ids on standard input, one a line) in the format $1;
#   part 1: the nodes by state of the partitions the pending ones wait in (sinfo);
#   part 2: for each pending job, how many pending jobs of its partitions are ahead of
#           it (`C|JOB|COUNT`, JOB its number) and the first $2 of them
#           (`A|JOB|ID|PRIORITY|USER|REASON`), from one squeue of those partitions;
#   part 3: the user's associations and the QOS the jobs use, with what is used of each
#           limit (scontrol show assoc_mgr), only when a job waits for a limit.
# The squeue format's fields: id, state, reason, partition, priority, then what the
# caller reads; the user is field $3, the QOS field $4 (numbers).
export TZ=UTC
format=$1 first=$2 user_field=$3 qos_field=$4
mapfile -t ids
# shellcheck disable=SC2317 # runs through `part`
# chunked CMD ARGS...: CMD ARGS --jobs=ID,... for every 2000 ids; the first failure's status.
chunked() {
  local rc=0 i IFS=,
  for ((i = 0; i < ${#ids[@]}; i += 2000)); do
    "$@" --jobs="${ids[*]:i:2000}" || rc=$?
  done
  return "$rc"
}
if [ "${#ids[@]}" -eq 0 ]; then
  part_empty 0
else
  part 0 chunked squeue --noheader --states=all --format="$format"
fi
# The partitions, users and QOS of the pending jobs, and whether one waits for a limit.
declare -A partitions=() users=() qos=()
limit=
while IFS='|' read -r -a row; do
  [ "${row[1]:-}" = PENDING ] || continue
  IFS=, read -r -a listed <<<"${row[3]}"
  for p in "${listed[@]}"; do [ -n "$p" ] && partitions[$p]=1; done
  [ -n "${row[user_field - 1]:-}" ] && users[${row[user_field - 1]}]=1
  [ -n "${row[qos_field - 1]:-}" ] && qos[${row[qos_field - 1]}]=1
  case ${row[2]} in Assoc* | QOS* | Max*) limit=1 ;; esac
done <"$frame_dir/0.out"
joined() {
  local IFS=,
  printf '%s' "$*"
}
# shellcheck disable=SC2317 # runs through `part`
# ahead PARTITIONS: the jobs ahead of each pending job of part 0 (see above): the
# pending jobs of its partitions squeue lists before it in the scheduler's order
# (priority, then job id; a tie in priority, as on clusters without priority weights,
# is broken the scheduler's way).
ahead() {
  squeue --noheader --states=PENDING --partition="$1" --sort=-p,i --format='%i|%Q|%P|%u|%r' |
    awk -F'|' -v first="$first" '
      NR == FNR {
        if ($2 == "PENDING") {
          n++; job[n] = $1; key[n] = $1; sub(/[_+].*/, "", key[n])
          split($4, p, ","); for (k in p) wants[n, p[k]] = 1
        }
        next
      }
      {
        split($3, in_p, ",")
        for (i = 1; i <= n; i++) {
          if (reached[i]) continue
          if ($1 == job[i]) { reached[i] = 1; continue }
          hit = 0
          for (k in in_p) if ((i, in_p[k]) in wants) hit = 1
          if (!hit) continue
          count[i]++
          if (count[i] <= first) print "A|" key[i] "|" $1 "|" $2 "|" $4 "|" $5
        }
      }
      END { for (i = 1; i <= n; i++) print "C|" key[i] "|" (count[i] + 0) }' "$frame_dir/0.out" -
}
if [ "${#partitions[@]}" -gt 0 ]; then
  wanted=$(joined "${!partitions[@]}")
  part 1 sinfo --noheader --partition="$wanted" --format='%R|%T|%D'
  part 2 ahead "$wanted"
else
  part_empty 1
  part_empty 2
fi
# shellcheck disable=SC2317 # runs through `part`
# limits: the associations of the users and the QOS named, one record a line.
limits() {
  local rc=0
  scontrol --oneliner show assoc_mgr flags=assoc users="$(joined "${!users[@]}")" || rc=$?
  if [ "${#qos[@]}" -gt 0 ]; then
    scontrol --oneliner show assoc_mgr flags=qos qos="$(joined "${!qos[@]}")" || rc=$?
  fi
  return "$rc"
}
if [ -n "$limit" ] && [ "${#users[@]}" -gt 0 ]; then
  part 3 limits
else
  part_empty 3
fi
exit 0
