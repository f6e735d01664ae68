# The round-trip framing, prepended to every script that runs several commands in one
# round trip. `part N CMD ARGS...` runs one command with no standard input and prints
# `@@begin N`, its stdout lines prefixed `O `, its stderr lines prefixed `E `, then
# `@@end N STATUS`; it returns the command's status. Output is text: a last line
# without a newline gets one. The raw stdout of part N stays in "$frame_dir/N.out"
# until the script ends, for scripts that decide what to run next from it.
frame_dir=$(mktemp -d "${TMPDIR:-/tmp}/slurm-run-frame.XXXXXXXX") || exit "$EXIT_NO_TEMP_DIR"
trap 'rm -rf -- "$frame_dir"' EXIT
part() {
  local n=$1 rc
  shift
  "$@" </dev/null >"$frame_dir/$n.out" 2>"$frame_dir/$n.err"
  rc=$?
  echo "@@begin $n"
  awk '{print "O " $0}' "$frame_dir/$n.out"
  awk '{print "E " $0}' "$frame_dir/$n.err"
  echo "@@end $n $rc"
  return "$rc"
}
