# shellcheck shell=bash
# $1 a file, $2 the byte offset already read: prints the file's size on the first
# line, then the bytes from the offset to that size.
size=$(stat -c %s -- "$1" 2>/dev/null) || exit "$EXIT_NO_FILE"
printf '%s\n' "$size"
if [ "$size" -gt "$2" ]; then tail -c +"$(($2 + 1))" -- "$1" | head -c "$((size - $2))"; fi
