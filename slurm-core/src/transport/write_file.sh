# The remote side of Transport::write_file. $1 the path, $2 the octal mode.
# The bytes arrive on stdin; they are written under a temporary name created with
# umask 077 and renamed into place, so the file is never readable by others, even
# for an instant, and never half-written.
set -e
umask 077
dir=$(dirname -- "$1")
tmp=$(mktemp -- "$dir/.slurm-run.XXXXXXXX")
trap 'rm -f -- "$tmp"' EXIT
cat > "$tmp"
chmod -- "$2" "$tmp"
mv -f -- "$tmp" "$1"
trap - EXIT
