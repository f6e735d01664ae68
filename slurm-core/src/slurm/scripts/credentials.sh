# shellcheck shell=bash
# enroot's registry credentials (~/.config/enroot/.credentials, netrc lines, mode 600):
# $1 install|remove, then the machines (hosts without port). `install` replaces the
# machines' lines with the lines on stdin and keeps every other line; `remove` drops
# them. Under umask 077 and a lock, written to a temporary file and renamed; the
# secret travels on stdin only and is never printed.
set -euo pipefail
umask 077
action=$1
shift
dir="${ENROOT_CONFIG_PATH:-${XDG_CONFIG_HOME:-$HOME/.config}/enroot}"
file="$dir/.credentials"
mkdir -p -- "$dir"
exec 9>"$file.lock"
flock 9
new=$(mktemp "$file.XXXXXX")
trap 'rm -f -- "$new"' EXIT
if [ -f "$file" ]; then
  awk -v drop="$*" 'BEGIN { n = split(drop, d, " "); for (i = 1; i <= n; i++) k[d[i]] = 1 }
    !($1 == "machine" && ($2 in k))' "$file" > "$new"
fi
case $action in
  install) cat >> "$new" ;;
  remove) ;;
  *) echo "credentials: unknown action $action" >&2; exit 2 ;;
esac
chmod 600 "$new"
mv -f -- "$new" "$file"
trap - EXIT
echo "file $file"
