# shellcheck shell=bash
# Settle submits whose outcome is unknown, in four framed parts: 0 the fence, 1 squeue,
# 2 sacct, 3 the cluster's settings that say how far each listing can be trusted.
# Standard input: one record a line, `FOLDER<TAB>NAME<TAB>ATTEMPTS[<TAB>IDS[<TAB>OWNER]]`
# (the job folder, the job name, how many sbatch attempts were counted, 0 for a record
# that predates counting: no fence, the scheduler alone decides; IDS the SLURM ids seen
# of it before, comma-separated, or `-`; OWNER the record's owner token, which claims
# the folder: see claim_folder). $1 how long to wait in all for attempts still
# running sbatch (seconds: one deadline for every record), $2 sacct's --starttime.
#
# Part 0, the fence, prints one line per record and attempt:
#   NAME N fenced          the attempt never reached sbatch, and now never will
#   NAME N done RC OUT ERR sbatch ran and exited RC; OUT and ERR its output in hex (- if empty)
#   NAME N running AGE     sbatch may still be running (its attempt began AGE seconds ago)
# then `NAME forgot` when every attempt is fenced (sbatch never ran: the secrets sidecar
# is removed here and then). `NAME foreign` instead: the folder belongs to another
# record of that name (none of this record's attempts can have run; its attempts'
# folders, answers and secrets are the other record's and are left alone).
# Parts 1 and 2 list the user's own jobs carrying any of the names, `ID|NAME` (an array
# as its tasks and pending ranges, 123_4, 123_[5-9]), from squeue and from sacct; sacct
# is asked by name and also by the ids known (IDS, and what the attempts printed: an
# array cancelled before any task started is missing from a listing by name on some
# releases). Each part's status says whether that tool answered.
# Part 3 prints `min_job_age SECONDS` (MinJobAge: how long slurmctld keeps an ended job)
# and `dbd_agent_queue N` (the messages slurmctld has not yet handed to slurmdbd: while
# there are any, sacct may lack the newest jobs), each when the cluster says.
umask 077
wait=$1 since=$2
list=$frame_dir/settle.list
ids=$frame_dir/settle.ids
cat >"$list"
: >"$ids"
# shellcheck disable=SC2317 # the functions below run through `part`
hex() { local text; text=$(od -An -v -tx1 -- "$1" 2>/dev/null | tr -d ' \n'); printf '%s' "${text:--}"; }
# shellcheck disable=SC2317 # runs through `part`
# known_ids IDS: the ids of a comma list that are job numbers, one a line, into the ids file.
known_ids() {
  local id
  local -a all
  IFS=, read -r -a all <<<"$1"
  for id in "${all[@]}"; do
    case $id in '' | *[!0-9]*) ;; *) printf '%s\n' "$id" >>"$ids" ;; esac
  done
}
# shellcheck disable=SC2317 # runs through `part`
fence() {
  local folder name attempts known owner n d deadline fenced_all
  # One deadline for every record: a stuck attempt costs the wait once, not per record.
  deadline=$((SECONDS + wait))
  while IFS=$'\t' read -r folder name attempts known owner; do
    [ -n "$name" ] || continue
    if ! [ "${attempts:-0}" -gt 0 ] 2>/dev/null; then known_ids "${known:-}"; continue; fi
    mkdir -p -- "$folder" 2>/dev/null
    if ! claim_folder "$folder" "${owner:-}"; then echo "$name foreign"; continue; fi
    known_ids "${known:-}"
    fenced_all=1
    for ((n = 1; n <= attempts; n++)); do
      d=$folder/.sbatch-$n
      if mkdir -- "$d" 2>/dev/null; then
        : >"$d/fenced"; echo "$name $n fenced"; continue
      fi
      # An attempt writes its status (rc) last, in one write: an rc still empty is being
      # written (or its writer was killed in between: then it stays running until its
      # age says it is dead, and the scheduler decides).
      while [ ! -s "$d/rc" ] && [ ! -e "$d/fenced" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
      # What the attempt printed names its job, whether or not its status was kept.
      [ -s "$d/out" ] && sed -n 's/^\([0-9][0-9]*\)\(;[^;]*\)\{0,1\}$/\1/p' -- "$d/out" >>"$ids"
      if [ -e "$d/fenced" ]; then
        echo "$name $n fenced"
      elif [ -s "$d/rc" ]; then
        fenced_all=0; echo "$name $n done $(head -c 16 -- "$d/rc" | tr -dc '0-9') $(hex "$d/out") $(hex "$d/err")"
      else
        fenced_all=0; echo "$name $n running $(( $(date +%s) - $(stat -c %Y -- "$d" 2>/dev/null || date +%s) ))"
      fi
    done
    if [ "$fenced_all" = 1 ] && [ -d "$folder" ]; then
      rm -rf -- "$folder/env"
      [ -e "$folder/env/job_$name.env" ] || echo "$name forgot"
    fi
  done <"$list"
}
mapfile -t names < <(cut -f2 -- "$list")
# shellcheck disable=SC2317 # runs through `part`
# by_names CMD ARGS...: CMD ARGS --name=N1,N2,... for every 100 names; the first failure's status.
by_names() {
  local rc=0 i chunk
  for ((i = 0; i < ${#names[@]}; i += 100)); do
    chunk=$(IFS=,; printf '%s' "${names[*]:i:100}")
    "$@" --name="$chunk" || rc=$?
  done
  return "$rc"
}
# shellcheck disable=SC2317 # runs through `part`
# by_ids CMD ARGS...: CMD ARGS -j ID,ID,... for every 500 ids known (none: nothing run).
by_ids() {
  local rc=0 i chunk
  local -a known
  mapfile -t known < <(sort -un -- "$ids")
  for ((i = 0; i < ${#known[@]}; i += 500)); do
    chunk=$(IFS=,; printf '%s' "${known[*]:i:500}")
    "$@" -j "$chunk" || rc=$?
  done
  return "$rc"
}
# shellcheck disable=SC2317 # runs through `part`
accounted() {
  local rc=0
  by_names sacct --noheader -X --parsable2 --format=JobID,JobName --starttime="$since" --user="$user" || rc=$?
  by_ids sacct --noheader -X --parsable2 --format=JobID,JobName --user="$user" || rc=$?
  return "$rc"
}
# shellcheck disable=SC2317 # runs through `part`
settings() {
  scontrol show config 2>/dev/null | sed -n 's/^MinJobAge *= *\([0-9][0-9]*\).*/min_job_age \1/p'
  sdiag 2>/dev/null | sed -n 's/^ *DBD Agent queue size: *\([0-9][0-9]*\).*/dbd_agent_queue \1/p'
  return 0
}
user=$(id -un)
part 0 fence
part 1 by_names squeue --noheader --states=all --format='%i|%j' --user="$user"
part 2 accounted
part 3 settings
exit 0
