# shellcheck shell=bash
# The remote steps of one submit, each timed on its own (bash's EPOCHREALTIME) over $2
# runs in a folder $1 made for it and removed after; the steps the submit script no
# longer takes are timed beside the ones that replaced them. Prints one line per step:
# NAME MEDIAN_MICROSECONDS. The claim timed is the submit's own (claim.sh, prepended).
work=$1 runs=$2
umask 077
mkdir -p -- "$work/sample/job/sbatch" "$work/sample/job/specs" "$work/sample/job/logs" || exit 1
cd -- "$work" || exit 1
# A staged job folder of a steady-state submit's size (a 2 KB batch script, its spec),
# with its checksums, as the archive a submit sends.
for ((i = 0; i < 30; i++)); do printf 'echo step %064d\n' "$i"; done >sample/job/sbatch/job.sbatch
printf '{"name":"steps","command":"true","resources":{"nodes":1,"gpus_per_node":1}}\n' >sample/job/specs/spec.json
(cd sample/job && sha256sum specs/spec.json sbatch/job.sbatch >SHA256SUMS) || exit 1
tar -c -f sample.tar -C sample job || exit 1
read -r bytes < <(wc -c <sample.tar)
declare -A took
a='' b='' owner=''
# now: microseconds since the epoch, by bash alone.
now() { local t=$EPOCHREALTIME; printf -v "$1" '%s' "${t/./}"; }
add() { took[$1]+="$(($3 - $2)) "; }
token=0123456789abcdef0123456789abcdef
# The program timed alone and under timeout: true's own file, not bash's builtin.
program=$(type -P true)
for ((i = 0; i < runs; i++)); do
  dir=$work/r$i/job
  now a; mkdir -p -- "$dir"; now b; add mkdir_p "$a" "$b"
  now a; claim_folder "$dir" "$token" || exit 1; now b; add claim "$a" "$b"
  now a
  printf '%s\n' "$token" >"$dir/.tmp.$i" && ln -- "$dir/.tmp.$i" "$dir/.owner-ln" 2>/dev/null
  rm -f -- "$dir/.tmp.$i"
  IFS= read -r -n 200 owner <"$dir/.owner-ln"
  now b; add claim_ln "$a" "$b"
  [ "$owner" = "$token" ] || exit 1
  now a; head -c "$bytes" <sample.tar >"in.$i"; now b; add input_copy "$a" "$b"
  now a; tar -x -m -C "$work/r$i" -f "in.$i"; now b; add tar "$a" "$b"
  cd -- "$dir" || exit 1
  now a; sha256sum --quiet --strict -c SHA256SUMS; now b; add sha256sum "$a" "$b"
  cd -- "$work" || exit 1
  now a; mkdir -- "$dir/.sbatch-1"; now b; add fence "$a" "$b"
  now a; timeout -k 5 90 "$program"; now b; add timeout_program "$a" "$b"
  now a; "$program"; now b; add program "$a" "$b"
  now a; printf '%s\n' 0 >"$dir/.sbatch-1/rc"; now b; add status "$a" "$b"
  now a; printf '%s\n' 0 >"$dir/.sbatch-1/rc.tmp" && mv -f -- "$dir/.sbatch-1/rc.tmp" "$dir/.sbatch-1/rc-mv"; now b
  add status_mv "$a" "$b"
done
cd / && rm -rf -- "$work"
for name in "${!took[@]}"; do
  # shellcheck disable=SC2086 # the samples are words
  printf '%s %s\n' "$name" "$(printf '%s\n' ${took[$name]} | sort -n | sed -n "$((runs / 2 + 1))p")"
done
