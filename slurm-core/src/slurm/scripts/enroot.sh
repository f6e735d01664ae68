# shellcheck shell=bash
# Prints `enroot` when enroot is not on PATH, and `credentials FILE` when enroot's
# credentials file is missing or empty.
command -v enroot >/dev/null 2>&1 || echo enroot
f="${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}/.credentials"
[ -s "$f" ] || echo "credentials $f"
exit 0
