# Runs each command given as positional parameters, the commands separated by the
# word --slurm-run-next--, in order, each framed by `part` (see frame.sh).
i=0
while [ $# -gt 0 ]; do
  argv=()
  while [ $# -gt 0 ] && [ "$1" != "--slurm-run-next--" ]; do argv+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  part "$i" "${argv[@]}"
  i=$((i+1))
done
exit 0
