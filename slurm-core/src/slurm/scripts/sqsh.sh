# shellcheck shell=bash
# sqsh_whole FILE: true when FILE is a whole squashfs image: the `hsqs` magic, and at
# least as many bytes as its superblock says it uses (bytes_used: 8 bytes, little
# endian, at offset 40), so a truncated copy is refused, not only a file that is no image.
# Two processes: one `od` reads the superblock's first 48 bytes, another the image's
# last byte (none when the file is shorter than bytes_used).
sqsh_whole() {
  local file=$1 i used=0 last
  local -a bytes
  [ -f "$file" ] || return 1
  read -r -a bytes < <(od -An -v -t u1 -w48 -N 48 -- "$file" 2>/dev/null) || return 1
  [ "${#bytes[@]}" -eq 48 ] && [ "${bytes[*]:0:4}" = "104 115 113 115" ] || return 1
  for ((i = 47; i >= 40; i--)); do used=$((used * 256 + bytes[i])); done
  [ "$used" -gt 0 ] || return 1
  last=$(od -An -t u1 -j $((used - 1)) -N 1 -- "$file" 2>/dev/null) && [ -n "${last// /}" ]
}
