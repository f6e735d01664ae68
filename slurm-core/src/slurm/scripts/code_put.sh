# shellcheck shell=bash
# Receive objects of a code tree and, with its manifest, make the tree: $1 the code
# store (<results root>/.code), $2 the tree's id, $3 `tree` when this archive is the
# last (it holds `manifest`), else `objects`. Stdin: a tar archive of
# `objects/<sha256>[x]` files (and `manifest`). Every object's SHA-256 is checked
# against its name before it is kept (read-only, mode 444, or 555 with `x`); the tree
# is made of hard links to the objects, read-only (remove one with chmod -R u+w first),
# under trees/<id>, then marked whole
# (trees/<id>.complete): the submit runs sbatch only after that.
umask 022
store=$1 tree=$2 part=$3
mkdir -p -- "$store/objects" "$store/trees" "$store/incoming" || exit "$EXIT_STORE_UNWRITABLE"
work=$(mktemp -d "$store/incoming/put.XXXXXX") || exit "$EXIT_STORE_UNWRITABLE"
trap 'rm -rf -- "$work"' EXIT
tar -x -m --no-same-owner --no-same-permissions -C "$work" -f - || exit "$EXIT_UNPACK_FAILED"
if [ -d "$work/objects" ]; then
  sums=$work/SHA256SUMS
  : > "$sums"
  for file in "$work/objects"/*; do
    [ -f "$file" ] || continue
    name=${file##*/}
    printf '%s  %s\n' "${name:0:64}" "$name" >> "$sums"
  done
  (cd "$work/objects" && sha256sum --quiet --strict -c "$sums") >&2 || exit "$EXIT_CHECKSUM_MISMATCH"
  for file in "$work/objects"/*; do
    [ -f "$file" ] || continue
    name=${file##*/}
    case $name in *x) chmod 555 "$file" ;; *) chmod 444 "$file" ;; esac
    mkdir -p -- "$store/objects/${name:0:2}"
    mv -f -- "$file" "$store/objects/${name:0:2}/$name"
  done
fi
[ "$part" = tree ] || exit 0
[ -e "$store/trees/$tree.complete" ] && exit 0
[ -f "$work/manifest" ] || exit "$EXIT_UNPACK_FAILED"
made=$work/tree
mkdir -p -- "$made"
while IFS=' ' read -r name path; do
  object=$store/objects/${name:0:2}/$name
  if [ ! -f "$object" ]; then
    echo "object $name of $path is not on the cluster" >&2; exit "$EXIT_OBJECT_MISSING"
  fi
  case $path in */*) mkdir -p -- "$made/${path%/*}" ;; esac
  ln -- "$object" "$made/$path" || exit "$EXIT_STORE_UNWRITABLE"
done < "$work/manifest"
# Another submit may have made the same tree meanwhile: its copy is as good.
if mv -T -- "$made" "$store/trees/$tree" 2>/dev/null; then
  # Its folders read-only too (the files are: they are the objects), once in place
  # (a folder moves to another parent only while writable).
  find "$store/trees/$tree" -type d -exec chmod a-w {} + || exit "$EXIT_STORE_UNWRITABLE"
elif [ ! -d "$store/trees/$tree" ]; then
  exit "$EXIT_STORE_UNWRITABLE"
fi
: > "$store/trees/$tree.complete"
