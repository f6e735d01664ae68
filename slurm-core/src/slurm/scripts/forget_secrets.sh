# shellcheck shell=bash
# Remove the secrets sidecars of jobs that have ended. Parameters: pairs `FOLDER NAME`
# (the job folder and the job name). Prints the name of each job whose sidecar is gone:
# its folder is visible and holds no sidecar any more, or the folder was never made
# (its parent, the results root, is visible without it).
while [ $# -ge 2 ]; do
  folder=$1 name=$2
  shift 2
  f=$folder/env/job_$name.env
  if [ -e "$f" ]; then shred -u -- "$f" 2>/dev/null || rm -f -- "$f"; fi
  # The env folder holds the sidecar only (and what a shred cut short left behind).
  [ -e "$f" ] || rm -rf -- "$folder/env" 2>/dev/null
  if [ ! -e "$f" ] && { [ -d "$folder" ] || [ -d "$(dirname -- "$folder")" ]; }; then
    printf '%s\n' "$name"
  fi
done
exit 0
