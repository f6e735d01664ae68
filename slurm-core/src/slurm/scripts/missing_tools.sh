# shellcheck shell=bash
# Prints each of the programs given as parameters that is not on PATH, one a line.
for t in "$@"; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done
exit 0
