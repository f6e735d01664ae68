# The round-trip framing, prepended to every script that runs several commands in one
# round trip. `part N CMD ARGS...` runs one command with no standard input and prints
# `@@begin N`, its stdout lines prefixed `O `, its stderr lines prefixed `E `, then
# `@@end N STATUS`; it returns the command's status. Output is text: a last line
# without a newline gets one. The raw stdout of part N stays in "$frame_dir/N.out"
# until the script ends, for scripts that decide what to run next from it.
# The long-lived remote shell hands each command an empty private folder of its own
# (`__SR_FRAME`, made ahead and removed later by the shell): then no process starts
# here. The first script claims it (a script it runs makes its own); without one (another
# transport), a folder is made and removed here. `keep_dir` is the shell's folder of
# frames (`__SR_KEEP`), private to the user, where a script may keep what its next run
# compares with (it outlives the command and goes with the shell); empty without one.
# shellcheck disable=SC2034 # read by the scripts framed with it that keep files (poll.sh)
keep_dir=
if [ -n "${__SR_FRAME:-}" ] && [ -d "$__SR_FRAME" ] && [ -O "$__SR_FRAME" ]; then
  frame_dir=$__SR_FRAME
  # shellcheck disable=SC2034 # as above
  if [ -n "${__SR_KEEP:-}" ] && [ -d "$__SR_KEEP" ] && [ -O "$__SR_KEEP" ]; then keep_dir=$__SR_KEEP; fi
else
  frame_dir=$(mktemp -d "${TMPDIR:-/tmp}/slurm-run-frame.XXXXXXXX") || exit "$EXIT_NO_TEMP_DIR"
  trap 'rm -rf -- "$frame_dir"' EXIT
fi
unset __SR_FRAME __SR_KEEP
part() {
  local n=$1 rc
  shift
  "$@" </dev/null >"$frame_dir/$n.out" 2>"$frame_dir/$n.err"
  rc=$?
  echo "@@begin $n"
  framed O "$frame_dir/$n.out"
  framed E "$frame_dir/$n.err"
  echo "@@end $n $rc"
  return "$rc"
}
# part_empty N: the answer of part N when there is nothing to run: no output, status 0
# (no command run and no file made).
# shellcheck disable=SC2317 # a library: not every script calls every function
part_empty() {
  printf '@@begin %s\n@@end %s 0\n' "$1" "$1"
}
# framed O|E FILE: each line of FILE prefixed `O ` or `E `. Bash's printf writes each
# line with a write of its own when it prints to a file (1.3 ms for 100 lines here, 20 ms
# for 10,000), so the lines are joined first (`printf -v`: 0.5 ms for 100) and written
# at once, with bash's builtins only (no process started: a poll's parts cost no more
# than the tools they run); a file of more than 2000 lines is prefixed by one awk
# instead (a process start, then a tenth of bash's time a line).
framed() {
  local lines text
  [ -s "$2" ] || return 0
  mapfile -t lines <"$2"
  if [ "${#lines[@]}" -gt 2000 ]; then
    awk -v tag="$1 " '{ sub(/^/, tag); print }' "$2"
    return
  fi
  case $1 in
    O) printf -v text 'O %s\n' "${lines[@]}" ;;
    *) printf -v text 'E %s\n' "${lines[@]}" ;;
  esac
  printf '%s' "$text"
}
