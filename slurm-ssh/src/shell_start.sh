# shellcheck shell=bash
# The set-up of slurm-run's long-lived remote shell, written to the shell once it
# has synced (see framing.rs for the protocol), then the kills of earlier shells'
# orphans and the ready line. It keeps the user's umask for the commands (__sr_um)
# and runs itself with 077: a private temporary folder for the commands' input and
# output files and their frame folders, job control (a process group per command),
# and the functions __sr_frames, __sr_kill and __sr_run. The exit statuses are named
# in the prelude (ShellExit); the transport opens another shell when one exits.
__sr_um=$(umask)
umask 077
set +e +u
set -m
command -v head >/dev/null 2>&1 || exit "$EXIT_SHELL_NO_HEAD"
__sr_d=$(mktemp -d "${TMPDIR:-/tmp}/slurm-run-shell.XXXXXXXX") || exit "$EXIT_SHELL_NO_TEMP_DIR"
trap 'rm -rf -- "$__sr_d"' EXIT
__sr_frames() {
  local j dirs=()
  for ((j = $1; j < $1 + 64; j++)); do dirs+=("$__sr_d/f.$j"); done
  mkdir -- "${dirs[@]}"
}
__sr_frames 1 || exit "$EXIT_SHELL_NO_TEMP_DIR"
exec 2>/dev/null
cd || exit "$EXIT_SHELL_NO_HOME"
__sr_boot=-
read -r __sr_boot < /proc/sys/kernel/random/boot_id
__sr_n=0
# __sr_kill PGID START BOOT MARKER: kill an earlier shell's command, only where provably
# its own (see framing.rs); PGID 0 (its report was lost): the user's processes carrying MARKER.
__sr_kill() {
  local g=$1 t=$2 b=$3 m=$4 f p e
  if [ "$g" != 0 ]; then
    if [ "$b" = - ] || [ "$b" != "$__sr_boot" ]; then return; fi
    if read -r f < "/proc/$g/stat"; then
      read -r -a f <<< "${f##*) }"
      if [ "${f[2]}" = "$g" ] && [ "${f[19]}" = "$t" ]; then kill -s KILL -- "-$g"; fi
      return
    fi
  fi
  for p in /proc/[0-9]*; do
    [ -O "$p" ] || continue
    read -r f < "$p/stat" || continue
    read -r -a f <<< "${f##*) }"
    [ "$g" = 0 ] || [ "${f[2]}" = "$g" ] || continue
    e=$(tr '\0' '\n' < "$p/environ") || continue
    case $'\n'"$e"$'\n' in *$'\n'"__SR_JOB=$m"$'\n'*) kill -s KILL "${p#/proc/}";; esac
  done
}
__sr_run() {
  local m=$1 n=$2 ok src=/dev/null s p o e t=- f
  __sr_n=$((__sr_n + 1))
  if [ $((__sr_n % 64)) -eq 0 ]; then
    rm -rf -- "$__sr_d"/[oei].* "$__sr_d"/f.*
    __sr_frames "$__sr_n"
  fi
  o=$__sr_d/o.$__sr_n e=$__sr_d/e.$__sr_n
  if [ "$n" -gt 0 ]; then
    src=$__sr_d/i.$__sr_n
    if ! head -c "$n" > "$src"; then
      : > "$src"; printf '%s X\n' "$m"; exit "$EXIT_SHELL_INPUT_UNWRITABLE"
    fi
  fi
  IFS= read -r ok
  if [ "$ok" != "$m" ]; then
    if [ "$n" -gt 0 ]; then : > "$src"; fi
    printf '%s X\n' "$m"
    if [ "$n" -gt 0 ]; then rm -f -- "$src"; fi
    return
  fi
  ( umask "$__sr_um"; export __SR_JOB="$m" __SR_FRAME="$__sr_d/f.$__sr_n"; eval "$3" ) < "$src" > "$o" 2> "$e" &
  p=$!
  if read -r f < "/proc/$p/stat"; then read -r -a f <<< "${f##*) }"; t=${f[19]}; fi
  printf '%s P %d %s %s\n' "$m" "$p" "$t" "$__sr_boot"
  wait "$p"; s=$?
  if [ "$n" -gt 0 ]; then : > "$src"; fi
  if [ -s "$o" ] || [ -s "$e" ]; then
    printf '%s O' "$m" > "$__sr_d/m"
    cat -- "$o" "$__sr_d/m" "$e"
  else
    printf '%s O' "$m"
  fi
  printf '%s E %d\n' "$m" "$s"
  if [ "$n" -gt 0 ]; then rm -f -- "$src"; fi
}
