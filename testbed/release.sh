# The Slurm release of a test bed (sourced by the test bed scripts, after lib.sh).
# 22.05 runs from this host's own packages. 24.11 (Debian trixie) and 26.05 (sid) run in
# a root filesystem of that suite, made once with mmdebstrap and cached in the state
# folder, entered through a mount namespace whose root it is (pivot_root, not chroot:
# enroot creates user namespaces, which the kernel refuses inside a chroot). The state
# folder is mounted at its own path inside, so every path `testbed/env` prints is the
# same on the host and in the cluster. A keeper process holds the namespace; every
# daemon of the bed runs in it, `testbed/admin` and `testbed/up` enter it.
# Facts behind each choice: ../shared/reference/SLURM-RELEASES.md.

TB_ROOT="$TB_DIR/rootfs"
TB_NAMESPACE_PID="$TB_DIR/run/namespace.pid"
TB_NAMESPACE_NAME=slurm-run-testbed-namespace
# Inside the release's namespace (set by testbed/up when it runs itself there).
TB_INSIDE=${SLURM_RUN_TESTBED_INSIDE:-}

# The Debian suite and archive options of each release in a root filesystem.
release_suite() {
  case $TB_SLURM in
    24.11) printf 'trixie\n' ;;
    26.05) printf 'sid\n' ;;
    *) return 1 ;;
  esac
}

# Whether this test bed's Slurm runs in a root filesystem of its own (else: the host's).
release_in_root() { [ "$TB_SLURM" != 22.05 ]; }

# Whether the commands of this process are the release's own (on the host for 22.05,
# in the namespace for the others).
release_here() { ! release_in_root || [ -n "$TB_INSIDE" ]; }

# The packages of the cluster itself: Slurm's daemons and commands, munge, MariaDB, sshd
# and the tools the remote scripts and tests use on the login node.
cluster_packages() {
  printf '%s\n' slurmctld slurmd slurmdbd slurm-client slurm-wlm-mysql-plugin munge \
    mariadb-server openssh-server openssh-client squashfs-tools procps hostname
}

# What the root filesystem holds beyond the cluster and the containers' packages: `mount`
# (umount, absent from sid's apt variant), python3 (sid's mmdebstrap only recommends it,
# and its path filters run on it when the torch image is built).
root_extra_packages() {
  printf '%s\n' mount python3 ca-certificates
}

# The mmdebstrap command line of the root filesystem (its recipe, stamped in the root).
root_recipe() {
  local suite packages
  suite=$(release_suite)
  packages=$({ cluster_packages; containers_packages --all; root_extra_packages; } | sort -u | paste -sd, -)
  printf '%s\n' --variant=apt "--include=$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*'
  # The archive's sid Release file is past its validity date here: apt refuses it without this.
  [ "$suite" != sid ] || printf '%s\n' '--aptopt=Acquire::Check-Valid-Until "false"'
  printf '%s\n' "$suite" "$TB_ROOT.new" http://deb.debian.org/debian
}

# The release's Slurm version as its slurmctld reports it (e.g. `slurm-wlm 24.11.5`).
root_slurm_version() {
  chroot "$TB_ROOT" /usr/sbin/slurmctld -V 2>/dev/null
}

# Remove a root filesystem folder, first unmounting what is still mounted under it (an
# mmdebstrap killed mid-way, by a full disk or a signal, leaves the host's /dev, /dev/shm,
# /sys and /proc bound inside: a plain rm -rf would empty the host's /dev/shm through
# them). Deepest mounts first; rm never crosses into another filesystem whatever is left.
root_remove() {
  local path=$1 mounts
  [ -e "$path" ] || return 0
  mapfile -t mounts < <(awk -v root="$(realpath "$path")" \
    '$5 == root || index($5, root "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  if [ "${#mounts[@]}" -gt 0 ]; then
    log "unmounting ${#mounts[@]} leftover mounts under $path"
    umount -l "${mounts[@]}" || die "could not unmount what is mounted under $path (see /proc/self/mountinfo)"
  fi
  rm -rf --one-file-system "$path"
}

# Make the root filesystem once (about a minute), cached: a stamp in it holds its recipe.
root_make() {
  local stamp="$TB_ROOT/.slurm-run-rootfs" recipe args
  mapfile -t args < <(root_recipe)
  recipe=$(printf '%s\n' "${args[@]}" | sha256sum)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$recipe" ]; then
    return 0
  fi
  ! namespace_alive || die "the root filesystem of $TB_DIR changed recipe while the test bed runs: testbed/down first"
  command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap is missing (apt-get install mmdebstrap)"
  log "making the Slurm $TB_SLURM root filesystem ($(release_suite), mmdebstrap; once, about a minute)"
  root_remove "$TB_ROOT.new"
  mmdebstrap "${args[@]}" >"$TB_DIR/log/rootfs.log" 2>&1 ||
    die "mmdebstrap did not make the Slurm $TB_SLURM root filesystem (see $TB_DIR/log/rootfs.log)"
  root_remove "$TB_ROOT"
  mv "$TB_ROOT.new" "$TB_ROOT"
  case $(root_slurm_version) in
    *" $TB_SLURM".*) ;;
    *) die "the $(release_suite) root filesystem holds $(root_slurm_version), not Slurm $TB_SLURM" ;;
  esac
  printf '%s\n' "$recipe" > "$stamp"
}

# Whether the keeper of this test bed's namespace runs (and its root is this bed's root).
namespace_alive() {
  local pid
  pid_alive "$TB_NAMESPACE_PID" "$TB_NAMESPACE_NAME" || return 1
  pid=$(tr -dc '0-9' < "$TB_NAMESPACE_PID")
  # Its root is this root filesystem (a bind mount: the same device and inode).
  [ "$(stat -L -c '%d:%i' "/proc/$pid/root" 2>/dev/null)" = "$(stat -c '%d:%i' "$TB_ROOT")" ]
}

# Start the keeper: a new mount namespace (private propagation: nothing here reaches the
# host's mounts), the root filesystem bound onto itself (pivot_root wants a mount point;
# enroot too), proc, sys (without the mounts under it: the host's cgroup hierarchies stay
# out of the cluster's reach), dev and the state folder mounted in it, then pivot_root
# into it and the old root detached. The keeper only sleeps; the namespace and its mounts go
# when its last process (the keeper, the daemons) ends.
namespace_start() {
  namespace_alive && return 0
  rm -f "$TB_NAMESPACE_PID"
  mkdir -p "$TB_ROOT/proc" "$TB_ROOT/sys" "$TB_ROOT/dev" "$TB_ROOT/.oldroot" "$TB_ROOT$TB_DIR"
  # The node names and this host's name resolve inside as outside.
  cp /etc/hosts "$TB_ROOT/etc/hosts"
  # shellcheck disable=SC2016 # expanded by the keeper's shell
  setsid unshare --mount --propagation private -- bash -c '
    set -e
    root=$1 dir=$2 name=$3
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --bind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount --bind "$dir" "$root$dir"
    cd "$root"
    pivot_root . .oldroot
    cd /
    umount -l /.oldroot
    exec -a "$name" sleep infinity
  ' keeper "$TB_ROOT" "$TB_DIR" "$TB_NAMESPACE_NAME" </dev/null >>"$TB_DIR/log/namespace.log" 2>&1 &
  echo $! > "$TB_NAMESPACE_PID"
  wait_for "the Slurm $TB_SLURM namespace" 15 namespace_alive ||
    die "the namespace of the Slurm $TB_SLURM root did not start (see $TB_DIR/log/namespace.log)"
}

# The command prefix (in TB_NAMESPACE_ENTER) that runs a command in this test bed's
# namespace (its root, its mounts) as root, with the release's standard PATH; nsenter
# execs, so the command keeps the pid of whoever execs the prefix.
namespace_enter() {
  namespace_alive ||
    die "the Slurm $TB_SLURM test bed in $TB_DIR is not up (testbed/up with SLURM_RUN_TESTBED_SLURM=$TB_SLURM)"
  TB_NAMESPACE_ENTER=(nsenter --target "$(tr -dc '0-9' < "$TB_NAMESPACE_PID")" --mount --root
    env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SLURM_RUN_TESTBED_INSIDE=1)
}

# Run a command in this test bed's namespace (see namespace_enter).
namespace_run() {
  namespace_enter
  "${TB_NAMESPACE_ENTER[@]}" "$@"
}

# The pids of every process in this test bed's namespace but the keeper (its daemons,
# their jobs' processes, mounts' helpers such as squashfuse).
namespace_processes() {
  local keeper ns proc
  keeper=$(tr -dc '0-9' < "$TB_NAMESPACE_PID")
  ns=$(readlink "/proc/$keeper/ns/mnt") || return 0
  for proc in /proc/[0-9]*; do
    [ "${proc#/proc/}" != "$keeper" ] && [ "$(readlink "$proc/ns/mnt" 2>/dev/null)" = "$ns" ] &&
      printf '%s\n' "${proc#/proc/}"
  done
  return 0
}

# End the namespace, after its daemons have stopped: what still runs in it (jobs' left
# processes) is ended, then the keeper; the namespace and every mount in it go with its
# last process.
namespace_stop() {
  local left i
  namespace_alive || { rm -f "$TB_NAMESPACE_PID"; return 0; }
  for i in 1 2; do
    mapfile -t left < <(namespace_processes)
    [ ${#left[@]} -gt 0 ] || break
    kill "-$([ "$i" = 1 ] && echo TERM || echo KILL)" "${left[@]}" 2>/dev/null || true
    wait_for "the processes left in the Slurm $TB_SLURM namespace to end" 10 namespace_empty || true
  done
  stop_pidfile "$TB_NAMESPACE_PID" "$TB_NAMESPACE_NAME"
}

namespace_empty() { [ -z "$(namespace_processes)" ]; }
