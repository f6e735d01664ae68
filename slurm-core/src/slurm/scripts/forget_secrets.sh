# shellcheck shell=bash
# Remove the secrets sidecars of jobs that have ended. Parameters: triples `FOLDER NAME
# OWNER` (the job folder, the job name, the record's owner token or empty). Prints the
# name of each job whose sidecar is gone: its folder is visible and holds no sidecar any
# more, or the folder was never made (its parent, the results root, is visible without
# it), or the folder is another record's (claimed by another owner token: nothing of
# this record's is there, and the other record's sidecar is left alone).
while [ $# -ge 3 ]; do
  folder=$1 name=$2 owner=$3
  shift 3
  if folder_foreign "$folder" "$owner"; then printf '%s\n' "$name"; continue; fi
  f=$folder/env/job_$name.env
  if [ -e "$f" ]; then shred -u -- "$f" 2>/dev/null || rm -f -- "$f"; fi
  # The env folder holds the sidecar only (and what a shred cut short left behind).
  [ -e "$f" ] || rm -rf -- "$folder/env" 2>/dev/null
  if [ ! -e "$f" ] && { [ -d "$folder" ] || [ -d "$(dirname -- "$folder")" ]; }; then
    printf '%s\n' "$name"
  fi
done
exit 0
