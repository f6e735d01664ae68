# shellcheck shell=bash
# The set-up of slurm-run's long-lived remote shell, written to the shell once it
# has synced (see framing.rs for the protocol), then the kills of earlier shells'
# orphans and the ready line. It keeps the user's umask for the commands (__sr_um)
# and runs itself with 077: a private temporary folder for the commands' input and
# output files and their frame folders, job control (a process group per command),
# and the functions __sr_frames, __sr_stat, __sr_kill, __sr_next and __sr_run. The exit statuses are named
# in the prelude (ShellExit); the transport opens another shell when one exits.
__sr_um=$(umask)
umask 077
set +e +u
set -m
command -v head >/dev/null 2>&1 || exit "$EXIT_SHELL_NO_HEAD"
__sr_d=$(mktemp -d "${TMPDIR:-/tmp}/slurm-run-shell.XXXXXXXX") || exit "$EXIT_SHELL_NO_TEMP_DIR"
# The frame folders (a framed script's working files: a poll's lists and squeue rows) on
# a memory file system the user can write, when there is one: a file made there costs
# a few microseconds, on a disk up to a millisecond. Each frame's files are emptied once
# its command has answered, so they hold no memory for long. Inputs and outputs stay in
# __sr_d (an upload can be larger than a memory file system).
# Named by the shell's pid: the frames of a shell killed before its exit trap ran (they
# would hold memory until the host restarts) are removed by the next shell of the user.
__sr_fd=$__sr_d
__sr_me=$BASHPID
for __sr_t in "${XDG_RUNTIME_DIR:-}" /dev/shm; do
  if [ -n "$__sr_t" ] && [ -d "$__sr_t" ] && [ -w "$__sr_t" ] &&
    __sr_fd=$(mktemp -d "$__sr_t/slurm-run-frames.$__sr_me.XXXXXXXX" 2>/dev/null); then
    for __sr_f in "$__sr_t"/slurm-run-frames.*.*; do
      __sr_p=${__sr_f#"$__sr_t"/slurm-run-frames.}
      __sr_p=${__sr_p%%.*}
      if [ -O "$__sr_f" ] && [ "$__sr_p" != "$__sr_me" ] && ! kill -0 "$__sr_p" 2>/dev/null; then
        rm -rf -- "$__sr_f"
      fi
    done
    break
  fi
  __sr_fd=$__sr_d
done
trap 'rm -rf -- "$__sr_d" "$__sr_fd"' EXIT
__sr_frames() {
  local j dirs=()
  for ((j = $1; j < $1 + 64; j++)); do dirs+=("$__sr_fd/f.$j"); done
  mkdir -- "${dirs[@]}"
}
__sr_frames 1 || exit "$EXIT_SHELL_NO_TEMP_DIR"
: > "$__sr_d/o.1" && : > "$__sr_d/e.1" || exit "$EXIT_SHELL_NO_TEMP_DIR"
exec 2>/dev/null
cd || exit "$EXIT_SHELL_NO_HOME"
__sr_boot=-
read -r __sr_boot < /proc/sys/kernel/random/boot_id
# __sr_stat PID: the fields of /proc/PID/stat after its command name, into the array
# __sr_ps (0 the state, 2 the process group, 19 the start time); fails once PID is gone.
__sr_stat() {
  local l
  read -r l < "/proc/$1/stat" || return
  read -r -a __sr_ps <<< "${l##*) }"
}
# The shell's own process group, which a kill of an orphan's group never hits.
__sr_group=-
if __sr_stat "$BASHPID"; then __sr_group=${__sr_ps[2]}; fi
__sr_n=0
# __sr_kill PGID START BOOT MARKER: kill an earlier shell's command, only where provably
# its own (see framing.rs); PGID 0 (its report was lost): the groups of the user's
# processes carrying MARKER (a script's subshell is a fork, its environment unread).
__sr_kill() {
  local g=$1 t=$2 b=$3 m=$4 p e
  if [ "$g" != 0 ]; then
    if [ "$b" = - ] || [ "$b" != "$__sr_boot" ]; then return; fi
    if __sr_stat "$g"; then
      if [ "${__sr_ps[2]}" = "$g" ] && [ "${__sr_ps[19]}" = "$t" ]; then kill -s KILL -- "-$g"; fi
      return
    fi
  fi
  for p in /proc/[0-9]*; do
    [ -O "$p" ] || continue
    __sr_stat "${p#/proc/}" || continue
    [ "$g" = 0 ] || [ "${__sr_ps[2]}" = "$g" ] || continue
    e=$(tr '\0' '\n' < "$p/environ") || continue
    case $'\n'"$e"$'\n' in
      *$'\n'"__SR_JOB=$m"$'\n'*)
        if [ "$g" = 0 ] && [ "${__sr_ps[2]}" != "$__sr_group" ]; then kill -s KILL -- "-${__sr_ps[2]}"; fi
        kill -s KILL "${p#/proc/}" ;;
    esac
  done
}
# __sr_next: ready the next command's files while the client reads this answer (nothing
# here is in a round trip): this command's frame files emptied; every 64 commands the old
# output files and frames removed and the next 64 frames made; the next command's output
# files made ahead, so its redirections truncate instead of create.
__sr_next() {
  local n=$((__sr_n + 1)) f
  for f in "$__sr_fd/f.$__sr_n"/*; do
    if [ -f "$f" ]; then : > "$f"; fi
  done
  if [ $((n % 64)) -eq 0 ]; then
    rm -rf -- "$__sr_d"/[oei].* "$__sr_fd"/f.*
    __sr_frames "$n"
  fi
  : > "$__sr_d/o.$n"
  : > "$__sr_d/e.$n"
}
# __sr_body LINE: a command's subshell: the user's umask, its marker and frame, the
# folder of the frames (where a script keeps what its next run compares with: it lives
# as long as the shell), LINE.
__sr_body() {
  umask "$__sr_um"
  export __SR_JOB="$__sr_m" __SR_FRAME="$__sr_fd/f.$__sr_n" __SR_KEEP="$__sr_fd"
  eval "$1"
}
# __sr_run MARKER N LINE [NAME TEXT]: run LINE once the trailer MARKER follows its N
# bytes of input (N as `=DATA`: the input is DATA, written once the trailer has come;
# as `+DATA`: the input is DATA and a newline, given as a here-string: no file made, none
# to remove); with NAME, first define TEXT (a fixed script) as the function NAME.
# Its variables are named __sr_*: a script's subshell sees them.
__sr_run() {
  local __sr_m=$1 __sr_len=$2 __sr_ok __sr_in=/dev/null __sr_st __sr_p __sr_o __sr_e __sr_t=-
  __sr_n=$((__sr_n + 1))
  __sr_o=$__sr_d/o.$__sr_n __sr_e=$__sr_d/e.$__sr_n
  case $__sr_len in
    =* | +* | 0) ;;
    *)
      __sr_in=$__sr_d/i.$__sr_n
      if ! head -c "$__sr_len" > "$__sr_in"; then
        : > "$__sr_in"; printf '%s X\n' "$__sr_m"; exit "$EXIT_SHELL_INPUT_UNWRITABLE"
      fi ;;
  esac
  IFS= read -r __sr_ok
  if [ "$__sr_ok" != "$__sr_m" ]; then
    if [ "$__sr_in" != /dev/null ]; then : > "$__sr_in"; fi
    printf '%s X\n' "$__sr_m"
    if [ "$__sr_in" != /dev/null ]; then rm -f -- "$__sr_in"; fi
    __sr_next
    return
  fi
  case $__sr_len in
    =*)
      __sr_in=$__sr_d/i.$__sr_n
      if ! printf '%s' "${__sr_len#=}" > "$__sr_in"; then
        : > "$__sr_in"; printf '%s X\n' "$__sr_m"; exit "$EXIT_SHELL_INPUT_UNWRITABLE"
      fi
      __sr_len=- ;;
  esac
  if [ $# -ge 5 ]; then eval "$4() {
$5
}"; fi
  case $__sr_len in
    +*) ( __sr_body "$3" ) <<< "${__sr_len#+}" > "$__sr_o" 2> "$__sr_e" & ;;
    *) ( __sr_body "$3" ) < "$__sr_in" > "$__sr_o" 2> "$__sr_e" & ;;
  esac
  __sr_p=$!
  if __sr_stat "$__sr_p"; then __sr_t=${__sr_ps[19]}; fi
  printf '%s P %d %s %s\n' "$__sr_m" "$__sr_p" "$__sr_t" "$__sr_boot"
  wait "$__sr_p"; __sr_st=$?
  if [ "$__sr_in" != /dev/null ]; then : > "$__sr_in"; fi
  if [ -s "$__sr_o" ] || [ -s "$__sr_e" ]; then
    printf '%s O' "$__sr_m" > "$__sr_d/m"
    cat -- "$__sr_o" "$__sr_d/m" "$__sr_e"
  else
    printf '%s O' "$__sr_m"
  fi
  printf '%s E %d\n' "$__sr_m" "$__sr_st"
  if [ "$__sr_in" != /dev/null ]; then rm -f -- "$__sr_in"; fi
  __sr_next
}
