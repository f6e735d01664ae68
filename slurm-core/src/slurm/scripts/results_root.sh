# shellcheck shell=bash
# $1 the results root, or empty for $HOME/slurm-run: makes it, checks that files
# can be created in it, prints it.
root=${1:-$HOME/slurm-run}
mkdir -p -- "$root" || exit 1
probe=$(mktemp "$root/.slurm-run-probe.XXXXXX") || { echo "cannot create files in $root" >&2; exit 1; }
rm -f -- "$probe"
printf '%s\n' "$root"
