# shellcheck shell=bash
# A job folder belongs to one record: the one whose owner token its `.owner` file holds.
# claim_folder DIR TOKEN: claim DIR for TOKEN when nobody has, then succeed only when DIR
# is TOKEN's. The claim is bash's own exclusive create (noclobber: O_CREAT|O_EXCL, which
# NFSv3+ and Lustre honour) of `.owner`, written in one write: no process started, and of
# claimers racing for DIR exactly one creates it. An empty TOKEN (a record from before
# owner tokens, whose ids are shorter than any minted since) claims and checks nothing.
# shellcheck disable=SC2317 # a library: not every script calls every function
claim_folder() {
  local dir=$1 token=$2 owner=
  [ -n "$token" ] || return 0
  if [ ! -e "$dir/.owner" ]; then
    set -C
    { printf '%s\n' "$token" >"$dir/.owner"; } 2>/dev/null
    set +C
  fi
  folder_owner "$dir"
  [ "$owner" = "$token" ]
}
# folder_foreign DIR TOKEN: whether DIR is claimed by another record than TOKEN's (an
# unclaimed folder, or no token, is not foreign: there is nothing to tell).
# shellcheck disable=SC2317 # a library: not every script calls every function
folder_foreign() {
  local dir=$1 token=$2 owner=
  [ -n "$token" ] && [ -e "$dir/.owner" ] || return 1
  folder_owner "$dir"
  [ "$owner" != "$token" ]
}
# folder_owner DIR: the token DIR's `.owner` file holds (its first line, read by bash
# itself: no process started) into the caller's variable `owner`; empty when it has none.
# A claimer creates the file and then writes its line: a `.owner` without its line is
# read again until the line is there (two seconds at most; a claimer killed in between
# leaves a folder nobody owns, which refuses every claim: nothing is ever submitted
# from it, and its record's next submit gets a new id and folder).
# shellcheck disable=SC2317 # a library: not every script calls every function
folder_owner() {
  local until=$((SECONDS + 2))
  owner=
  until IFS= read -r -n 200 owner 2>/dev/null <"$1/.owner"; do
    # A line of 200 characters or more is read whole by -n; EOF before a newline: not
    # yet written (or a token without its newline, which no claimer writes).
    if [ -n "$owner" ] || [ ! -e "$1/.owner" ] || [ "$SECONDS" -ge "$until" ]; then break; fi
  done
}
