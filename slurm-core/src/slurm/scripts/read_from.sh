# shellcheck shell=bash
# $1 a file, $2 the byte offset already read, $3 the most bytes to send: prints the
# file's size on the first line, then at most $3 bytes from the offset.
size=$(stat -c %s -- "$1" 2>/dev/null) || exit "$EXIT_NO_FILE"
printf '%s\n' "$size"
if [ "$size" -gt "$2" ]; then
  n=$((size - $2))
  [ "$n" -le "$3" ] || n=$3
  tail -c +"$(($2 + 1))" -- "$1" | head -c "$n"
fi
