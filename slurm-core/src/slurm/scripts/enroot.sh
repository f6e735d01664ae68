# shellcheck shell=bash
# What a conversion needs on the login side (the conversion step inherits this
# environment): prints `enroot` when enroot is not on PATH, then `file PATH` (enroot's
# credentials file) and `missing MACHINE` for each of the machines $@ that has no line
# in it. Never prints a password.
command -v enroot >/dev/null 2>&1 || echo enroot
f="${ENROOT_CONFIG_PATH:-${XDG_CONFIG_HOME:-$HOME/.config}/enroot}/.credentials"
echo "file $f"
for m in "$@"; do
  awk -v m="$m" '$1 == "machine" && $2 == m && $3 == "login" && NF >= 6 { found = 1 } END { exit !found }' "$f" 2>/dev/null ||
    echo "missing $m"
done
exit 0
