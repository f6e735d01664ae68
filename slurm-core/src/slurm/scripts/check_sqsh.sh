# shellcheck shell=bash
# Whether $1 is a whole squashfs image (sqsh_whole, from the library): exit 0, or
# EXIT_NOT_WHOLE with a line saying why.
if sqsh_whole "$1"; then exit 0; fi
if [ ! -e "$1" ]; then
  echo "$1 does not exist" >&2
elif [ "$(head -c 4 -- "$1" 2>/dev/null)" = hsqs ]; then
  echo "$1 is truncated (shorter than its squashfs superblock says)" >&2
else
  echo "$1 is not a squashfs image" >&2
fi
exit "$EXIT_NOT_WHOLE"
