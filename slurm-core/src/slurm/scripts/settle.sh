# shellcheck shell=bash
# Settle submits whose outcome is unknown, in three framed parts: 0 the fence, 1 squeue,
# 2 sacct. Standard input: one record a line, `FOLDER<TAB>NAME<TAB>ATTEMPTS` (the job
# folder, the job name, how many sbatch attempts were counted; 0 for a record that
# predates counting: no fence, the scheduler alone decides). $1 how long to wait for an
# attempt still running sbatch (seconds), $2 sacct's --starttime.
#
# Part 0, the fence, prints one line per record and attempt:
#   NAME N fenced          the attempt never reached sbatch, and now never will
#   NAME N done RC OUT ERR sbatch ran and exited RC; OUT and ERR its output in hex (- if empty)
#   NAME N running AGE     sbatch may still be running (its attempt began AGE seconds ago)
# then `NAME forgot` when every attempt is fenced (sbatch never ran: the secrets sidecar
# is removed here and then).
# Parts 1 and 2 list the user's own jobs carrying any of the names, `ID|NAME`, from
# squeue and from sacct; each part's status says whether that tool answered.
wait=$1 since=$2
list=$frame_dir/settle.list
cat >"$list"
# shellcheck disable=SC2317 # the functions below run through `part`
hex() { local text; text=$(od -An -v -tx1 -- "$1" 2>/dev/null | tr -d ' \n'); printf '%s' "${text:--}"; }
# shellcheck disable=SC2317 # runs through `part`
fence() {
  local folder name attempts n d deadline fenced_all
  while IFS=$'\t' read -r folder name attempts; do
    if [ -z "$name" ] || ! [ "${attempts:-0}" -gt 0 ] 2>/dev/null; then continue; fi
    mkdir -p -- "$folder" 2>/dev/null
    fenced_all=1
    for ((n = 1; n <= attempts; n++)); do
      d=$folder/.sbatch-$n
      if mkdir -- "$d" 2>/dev/null; then
        : >"$d/fenced"; echo "$name $n fenced"; continue
      fi
      deadline=$((SECONDS + wait))
      while [ ! -e "$d/rc" ] && [ ! -e "$d/fenced" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
      if [ -e "$d/fenced" ]; then
        echo "$name $n fenced"
      elif [ -e "$d/rc" ]; then
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
user=$(id -un)
part 0 fence
part 1 by_names squeue --noheader --states=all --format='%i|%j' --user="$user"
part 2 by_names sacct --noheader -X --parsable2 --format=JobIDRaw,JobName --starttime="$since" --user="$user"
exit 0
