# shellcheck shell=bash
# Prints each of the paths given as parameters that does not exist, one a line.
for p in "$@"; do [ -e "$p" ] || printf '%s\n' "$p"; done
exit 0
