# shellcheck shell=bash
# Which objects of a code tree the cluster lacks: $1 the code store
# (<results root>/.code), $2 the tree's id. A tree already whole (its `.complete`
# marker) prints `tree present`; otherwise one missing object name per line of the
# names on stdin.
store=$1 tree=$2
if [ -e "$store/trees/$tree.complete" ]; then
  cat >/dev/null
  echo "tree present"
  exit 0
fi
while IFS= read -r name; do
  [ -n "$name" ] || continue
  [ -f "$store/objects/${name:0:2}/$name" ] || printf '%s\n' "$name"
done
