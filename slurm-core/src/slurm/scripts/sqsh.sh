# shellcheck shell=bash
# sqsh_whole FILE: true when FILE is a whole squashfs image: the `hsqs` magic, and at
# least as many bytes as its superblock says it uses (bytes_used: 8 bytes, little
# endian, at offset 40), so a truncated copy is refused, not only a file that is no image.
sqsh_whole() {
  local file=$1 used size
  [ -f "$file" ] && [ "$(head -c 4 -- "$file" 2>/dev/null)" = hsqs ] || return 1
  used=$(od -An -t u8 -j 40 -N 8 -- "$file" 2>/dev/null | tr -d ' \n') || return 1
  size=$(stat -c %s -- "$file" 2>/dev/null) || return 1
  [ -n "$used" ] && [ "$used" -gt 0 ] && [ "$size" -ge "$used" ]
}
