# shellcheck shell=bash
# Prints what slurm-run reads of the cluster's configuration: the ClusterName and
# SLURM_VERSION (the controller's release) lines of `scontrol show config` (nothing when
# scontrol cannot say), then `client ` and the login node's own release (`scontrol
# --version`).
scontrol show config 2>/dev/null | grep -E '^(ClusterName|SLURM_VERSION) *='
printf 'client %s\n' "$(scontrol --version 2>/dev/null)"
exit 0
