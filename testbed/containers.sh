# Containers on the test bed (sourced by testbed/up and testbed/env, after lib.sh): real
# enroot and Pyxis built from the vendored release archives, their configuration, a
# private registry with basic auth on 127.0.0.1, and the TEST-BED FIXTURE images pushed
# to it. Everything per instance lives under $TB_DIR/containers and $TB_DIR/registry;
# the host-global paths enroot and Pyxis need (/run/enroot, /var/tmp/enroot, /run/pyxis,
# /dev/fuse) are shared and per-user safe (each test bed has its own job user).
# Facts behind each choice: ../shared/reference/PYXIS-TESTBED.md.

# The release archives: found through SLURM_RUN_VENDOR_DIR, by default the `shared/vendor`
# folder beside the checkout; their sha256 are pinned in testbed/vendor.sha256.
TB_VENDOR_DIR=${SLURM_RUN_VENDOR_DIR:-$(cd "$here/../.." && pwd)/shared/vendor}
TB_ENROOT_VERSION=4.1.2
TB_PYXIS_VERSION=0.24.0
TB_CONTAINERS="$TB_DIR/containers"
TB_ENROOT_PREFIX="$TB_CONTAINERS/enroot"
TB_PYXIS_PREFIX="$TB_CONTAINERS/pyxis"
TB_PLUGSTACK="$TB_DIR/etc/plugstack.conf"
TB_REGISTRY_DIR="$TB_DIR/registry"
TB_REGISTRY_USER=slurm-run-test
# The fixture images: each holds /etc/slurm-run-image with its own name:tag.
TB_IMAGES=(slurm-run/tiny:1 slurm-run/tiny:latest)
# The CPU PyTorch image (Debian 12's python3-torch, torchrun, Gloo) for the NCCL probe.
TB_TORCH_IMAGE=slurm-run/torch:1

# Packages enroot, Pyxis, the registry and the image build need (the same names in
# bookworm, trixie and sid): those not installed, or all of them with --all.
containers_packages() {
  local pkg
  for pkg in gcc make libc6-dev libbsd-dev linux-libc-dev makeself libcap2-bin curl gawk jq \
    parallel passwd squashfs-tools zstd pigz bsdmainutils squashfuse fuse3 fuse-overlayfs \
    libslurm-dev docker-registry skopeo umoci apache2-utils mmdebstrap; do
    [ "${1:-}" != --all ] && dpkg -s "$pkg" >/dev/null 2>&1 || printf '%s\n' "$pkg"
  done
}

# The pinned archives, verified; fails naming the upstream releases when one is missing.
containers_verify_archives() {
  local pins="$here/vendor.sha256" name
  while read -r _ name; do
    [ -f "$TB_VENDOR_DIR/$name" ] || die "missing $TB_VENDOR_DIR/$name: the test bed builds NVIDIA enroot $TB_ENROOT_VERSION (release v$TB_ENROOT_VERSION, enroot-$TB_ENROOT_VERSION.tar.gz) and NVIDIA Pyxis $TB_PYXIS_VERSION (release v$TB_PYXIS_VERSION, pyxis-$TB_PYXIS_VERSION.tar.gz) from their source archives; put both in $TB_VENDOR_DIR or point SLURM_RUN_VENDOR_DIR at the folder holding them"
  done < "$pins"
  (cd "$TB_VENDOR_DIR" && sha256sum --quiet --strict -c "$pins") >&2 ||
    die "an archive in $TB_VENDOR_DIR does not match its sha256 pinned in $pins"
}

# Build enroot and Pyxis once into the state folder; a stamp names the pinned archives.
containers_build() {
  local stamp="$TB_CONTAINERS/built.sha256" build multiarch
  if [ -f "$stamp" ] && cmp -s "$stamp" "$here/vendor.sha256" &&
    [ -x "$TB_ENROOT_PREFIX/bin/enroot" ] && [ -f "$TB_PYXIS_PREFIX/lib/slurm/spank_pyxis.so" ]; then
    return 0
  fi
  containers_verify_archives
  log "building enroot $TB_ENROOT_VERSION and Pyxis $TB_PYXIS_VERSION"
  rm -rf "$TB_CONTAINERS" && mkdir -p "$TB_CONTAINERS"
  # Outside any git work tree: enroot's make runs git in its deps folders.
  build="$TB_CONTAINERS/build"
  mkdir -p "$build"
  tar -xzf "$TB_VENDOR_DIR/enroot-$TB_ENROOT_VERSION.tar.gz" -C "$build"
  tar -xzf "$TB_VENDOR_DIR/pyxis-$TB_PYXIS_VERSION.tar.gz" -C "$build"
  multiarch=$(gcc -print-multiarch)
  (
    set -e
    cd "$build/enroot-$TB_ENROOT_VERSION"
    # The release archive holds no submodules: Debian's makeself and kernel headers stand in.
    mkdir -p deps/dist/makeself/bin deps/dist/linux/include deps/makeself deps/linux-headers
    cp /usr/bin/makeself deps/dist/makeself/bin/enroot-makeself
    touch deps/makeself/.stamp deps/linux-headers/.stamp
    export FORCE_GLIBC=1 LOADLIBES="/usr/lib/$multiarch/libbsd.a"
    export CPPFLAGS="-D_GNU_SOURCE= -include bsd/string.h"
    make prefix="$TB_ENROOT_PREFIX"
    make install prefix="$TB_ENROOT_PREFIX"
    make setcap prefix="$TB_ENROOT_PREFIX"
  ) >"$TB_DIR/log/enroot-build.log" 2>&1 &
  build_succeeded $! || die "enroot did not build (see $TB_DIR/log/enroot-build.log)"
  (
    set -e
    cd "$build/pyxis-$TB_PYXIS_VERSION"
    make
    make install prefix="$TB_PYXIS_PREFIX"
  ) >"$TB_DIR/log/pyxis-build.log" 2>&1 &
  build_succeeded $! || die "Pyxis did not build (see $TB_DIR/log/pyxis-build.log)"
  rm -rf "$build"
  cp "$here/vendor.sha256" "$stamp"
}

# enroot's configuration, Pyxis's plugstack line, the shared runtime folders: before slurmd starts.
containers_configure() {
  mkdir -p "$TB_ENROOT_PREFIX/etc/enroot/enroot.conf.d"
  # Evaluated per call, as the calling user: one folder per user keeps test beds apart.
  cat > "$TB_ENROOT_PREFIX/etc/enroot/enroot.conf.d/slurm-run-testbed.conf" <<'EOF'
# slurm-run test bed: per-user runtime, data and cache paths (the defaults are not
# writable by users), a per-node data path (two slurmd share this host), plain HTTP
# for the test registry on loopback.
ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)
ENROOT_DATA_PATH /var/tmp/enroot/data/user-$(id -u)${SLURM_TOPOLOGY_ADDR:+-$SLURM_TOPOLOGY_ADDR}
ENROOT_CACHE_PATH /var/tmp/enroot/cache/user-$(id -u)
ENROOT_ALLOW_HTTP yes
EOF
  install -d -m 1777 /run/enroot /var/tmp/enroot /var/tmp/enroot/data /var/tmp/enroot/cache
  install -d -m 755 /run/pyxis
  # squashfuse runs as the job user (no udev here: reapplied on every up).
  chmod 0666 /dev/fuse
  printf 'required %s runtime_path=/run/pyxis use_squashfuse=1 use_enroot_load=1\n' \
    "$TB_PYXIS_PREFIX/lib/slurm/spank_pyxis.so" > "$TB_PLUGSTACK"
  chmod 644 "$TB_PLUGSTACK"
}

# Whether a running slurmd (by pid file) has enroot on its PATH (Pyxis runs slurmd's enroot).
slurmd_sees_enroot() {
  local pid
  pid=$(tr -dc '0-9' < "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -q "^PATH=.*$TB_ENROOT_PREFIX/bin"
}

registry_url() { printf 'http://127.0.0.1:%s' "$TB_REGISTRY_PORT"; }

registry_answers() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$(registry_url)/v2/")" = 401 ]
}

# The registry: basic auth (bcrypt htpasswd), storage and config under $TB_REGISTRY_DIR.
registry_start() {
  mkdir -p "$TB_REGISTRY_DIR/data"
  chmod 700 "$TB_REGISTRY_DIR"
  if [ ! -s "$TB_REGISTRY_DIR/password" ]; then
    (umask 077; head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TB_REGISTRY_DIR/password")
  fi
  if [ ! -s "$TB_REGISTRY_DIR/htpasswd" ]; then
    # The password on stdin, never in argv.
    htpasswd -B -i -c "$TB_REGISTRY_DIR/htpasswd" "$TB_REGISTRY_USER" < "$TB_REGISTRY_DIR/password" 2>/dev/null
  fi
  cat > "$TB_REGISTRY_DIR/config.yml" <<EOF
# slurm-run test bed: a private registry (TEST-BED FIXTURE) on loopback with basic auth.
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $TB_REGISTRY_DIR/data
http:
  addr: 127.0.0.1:$TB_REGISTRY_PORT
auth:
  htpasswd:
    realm: slurm-run-testbed
    path: $TB_REGISTRY_DIR/htpasswd
EOF
  if ! pid_alive "$TB_DIR/run/registry.pid" docker-registry; then
    rm -f "$TB_DIR/run/registry.pid"
    setsid docker-registry serve "$TB_REGISTRY_DIR/config.yml" </dev/null >>"$TB_DIR/log/registry.log" 2>&1 &
    echo $! > "$TB_DIR/run/registry.pid"
    wait_for "the registry" 30 registry_answers || die "the registry did not start (see $TB_DIR/log/registry.log)"
  fi
}

# build_succeeded PID: whether the build subshell PID (started with `( set -e ... ) &`)
# exited 0. Bash ignores `set -e` inside a subshell whose status `||` or `if` tests, so a
# build's steps run as a background job (where `set -e` holds: its first failure ends it)
# and only `wait` is tested.
build_succeeded() {
  wait "$1"
}

# A root filesystem with bash and coreutils copied from this host, and their libraries.
image_rootfs() {
  local root=$1 name=$2 bin lib
  mkdir -p "$root"/{usr/bin,usr/lib,lib64,etc,tmp,proc,sys,dev,root}
  ln -s usr/bin "$root/bin"
  ln -s usr/lib "$root/lib"
  for bin in /usr/bin/bash $(dpkg -L coreutils | grep -E '^/(usr/)?bin/[^/]+$'); do
    [ -f "$bin" ] && cp -L "$bin" "$root/usr/bin/"
  done
  ln -s bash "$root/usr/bin/sh"
  for lib in $(ldd "$root"/usr/bin/* 2>/dev/null | grep -oE '/[^ ]+\.so[^ ]*' | sort -u); do
    case $lib in
      /lib64/*) cp -L "$lib" "$root/lib64/" ;;
      *) mkdir -p "$root/usr$(dirname "${lib#/usr}")" && cp -L "$lib" "$root/usr${lib#/usr}" ;;
    esac
  done
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
  printf 'root:x:0:\n' > "$root/etc/group"
  printf '%s\n' "$name" > "$root/etc/slurm-run-image"
}

# Build each fixture image offline and push it (v2s2: enroot cannot read an OCI manifest).
images_push() {
  local recipe stamp="$TB_REGISTRY_DIR/images.stamp" work image tag auth
  recipe=$(printf '%s\n' "${TB_IMAGES[@]}" "$(declare -f image_rootfs images_push)" | sha256sum)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$recipe" ]; then
    return 0
  fi
  log "building and pushing the fixture images: ${TB_IMAGES[*]}"
  work=$(mktemp -d /var/tmp/slurm-run-images.XXXXXX)
  # Credentials for skopeo in a mode-600 auth file, never in argv.
  auth="$work/auth.json"
  (umask 077; printf '{"auths":{"127.0.0.1:%s":{"auth":"%s"}}}\n' "$TB_REGISTRY_PORT" \
    "$(printf '%s:%s' "$TB_REGISTRY_USER" "$(cat "$TB_REGISTRY_DIR/password")" | base64 -w0)" > "$auth")
  (
    set -e
    umoci init --layout "$work/oci"
    for image in "${TB_IMAGES[@]}"; do
      tag=${image##*:}
      umoci new --image "$work/oci:$tag"
      umoci unpack --image "$work/oci:$tag" "$work/bundle-$tag"
      image_rootfs "$work/bundle-$tag/rootfs" "$image"
      umoci repack --image "$work/oci:$tag" "$work/bundle-$tag"
      umoci config --image "$work/oci:$tag" --config.cmd /bin/sh
      skopeo copy --quiet --format v2s2 --dest-tls-verify=false --dest-authfile "$auth" \
        "oci:$work/oci:$tag" "docker://127.0.0.1:$TB_REGISTRY_PORT/$image"
    done
  ) >"$TB_DIR/log/images.log" 2>&1 &
  build_succeeded $! || { rm -rf "$work"; die "the fixture images were not pushed (see $TB_DIR/log/images.log)"; }
  rm -rf "$work"
  printf '%s\n' "$recipe" > "$stamp"
}

# The Debian archive apt uses here (its bookworm sources), for mmdebstrap. In a release's
# root filesystem (another suite, no bookworm sources) the host's, which testbed/up copies
# beside the scripts it runs there.
debian_sources() {
  grep -ls bookworm /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    "$here"/apt-sources/* 2>/dev/null || true
}

# mmdebstrap's customize hook for the torch image ($1: its root): what a CPU probe needs
# kept, the rest of what python3-torch drags in (opencv's ffmpeg, mesa, gdal, perl...)
# removed, Debian's torchrun made to start on Python 3.11, and the TEST-BED FIXTURE hang
# switch installed.
torch_customize() {
  local root=$1 api
  rm -rf "$root"/usr/lib/x86_64-linux-gnu/libLLVM-15.so* "$root"/usr/lib/x86_64-linux-gnu/libz3.so* \
    "$root"/usr/lib/x86_64-linux-gnu/dri "$root"/usr/lib/x86_64-linux-gnu/mfx \
    "$root"/usr/lib/x86_64-linux-gnu/libmfxhw64.so* "$root"/usr/lib/x86_64-linux-gnu/libmfx-gen* \
    "$root"/usr/lib/x86_64-linux-gnu/perl* "$root"/usr/share/perl* "$root"/usr/lib/libtorch-test \
    "$root"/usr/share/proj "$root"/usr/share/gdal "$root"/usr/share/icons "$root"/var/cache/* \
    "$root"/var/lib/apt/lists/* "$root"/usr/lib/python3/dist-packages/sympy/*/tests
  # Debian's torch 1.13 on Python 3.11: iterating a Flag skips Std.NONE, so torchrun dies
  # parsing its --redirects default (fixed in later torch); return the member directly.
  api="$root/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py"
  sed -i 's/^\(            \)v = int(v)$/&\n\1return Std(v)  # slurm-run test bed: Python 3.11/' "$api"
  grep -q 'return Std(v)  # slurm-run test bed' "$api" || { echo "torchrun patch did not apply" >&2; return 1; }
  cat > "$root/usr/lib/python3/dist-packages/slurm_run_fixture_hang.py" <<'EOF'
# TEST-BED FIXTURE of slurm-run, in the test image slurm-run/torch only (no real image has
# it). When SLURM_RUN_FIXTURE_HANG_UNLESS names a variable that is not set to 1,
# torch.distributed.all_reduce never returns, as a collective over a broken NCCL transport
# hangs: the NCCL probe's knob ladder can then be tested on CPUs (Gloo), where setting
# that knob is what makes the collective pass.
import os

_knob = os.environ.get("SLURM_RUN_FIXTURE_HANG_UNLESS")
if _knob and os.environ.get(_knob) != "1":
    import time

    import torch.distributed as _dist

    def _hang(*args, **kwargs):
        while True:
            time.sleep(1)

    _dist.all_reduce = _hang
EOF
  printf 'import slurm_run_fixture_hang\n' > "$root/usr/lib/python3/dist-packages/slurm_run_fixture_hang.pth"
  printf '%s\n' "$TB_TORCH_IMAGE" > "$root/etc/slurm-run-image"
}

# Build the torch image offline from the Debian archive (mmdebstrap), once, and push it.
torch_image_push() {
  local stamp="$TB_REGISTRY_DIR/torch.stamp" recipe work auth sources
  mapfile -t sources < <(debian_sources)
  recipe=$( { printf '%s\n' "$TB_TORCH_IMAGE"; declare -f torch_customize torch_image_push; cat "${sources[@]}"; } | sha256sum)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$recipe" ]; then
    return 0
  fi
  [ ${#sources[@]} -gt 0 ] || die "no bookworm apt sources in /etc/apt: the torch image is built from the Debian archive apt uses"
  log "building and pushing $TB_TORCH_IMAGE (python3-torch from the Debian archive; once, a few minutes)"
  work=$(mktemp -d /var/tmp/slurm-run-torch.XXXXXX)
  auth="$work/auth.json"
  (umask 077; printf '{"auths":{"127.0.0.1:%s":{"auth":"%s"}}}\n' "$TB_REGISTRY_PORT" \
    "$(printf '%s:%s' "$TB_REGISTRY_USER" "$(cat "$TB_REGISTRY_DIR/password")" | base64 -w0)" > "$auth")
  {
    printf '#!/bin/bash\nset -euo pipefail\nTB_TORCH_IMAGE=%q\n' "$TB_TORCH_IMAGE"
    declare -f torch_customize
    # shellcheck disable=SC2016 # "$1" is for the hook script, not expanded here
    printf '%s\n' 'torch_customize "$1"'
  } > "$work/customize.sh"
  chmod 755 "$work/customize.sh"
  (
    set -e
    mmdebstrap --variant=essential --include=python3-torch --skip=output/dev \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --customize-hook="$work/customize.sh" bookworm "$work/rootfs.tar" "${sources[@]}"
    umoci init --layout "$work/oci"
    umoci new --image "$work/oci:1"
    umoci raw add-layer --image "$work/oci:1" "$work/rootfs.tar"
    rm -f "$work/rootfs.tar"
    umoci config --image "$work/oci:1" --config.cmd /bin/sh \
      --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    skopeo copy --quiet --format v2s2 --dest-tls-verify=false --dest-authfile "$auth" \
      "oci:$work/oci:1" "docker://127.0.0.1:$TB_REGISTRY_PORT/$TB_TORCH_IMAGE"
  ) >"$TB_DIR/log/torch-image.log" 2>&1 &
  build_succeeded $! || { rm -rf "$work"; die "$TB_TORCH_IMAGE was not built and pushed (see $TB_DIR/log/torch-image.log)"; }
  rm -rf "$work"
  printf '%s\n' "$recipe" > "$stamp"
}

containers_healthy() {
  [ -x "$TB_ENROOT_PREFIX/bin/enroot" ] && [ -s "$TB_PLUGSTACK" ] &&
    [ "$(stat -c %a /dev/fuse 2>/dev/null)" = 666 ] && [ -d /run/enroot ] &&
    slurmd_sees_enroot "$TB_DIR/run/slurmd-n1.pid" && slurmd_sees_enroot "$TB_DIR/run/slurmd-n2.pid" &&
    pid_alive "$TB_DIR/run/registry.pid" docker-registry && registry_answers &&
    [ -s "$TB_REGISTRY_DIR/images.stamp" ] && [ -s "$TB_REGISTRY_DIR/torch.stamp" ]
}
