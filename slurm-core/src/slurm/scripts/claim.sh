# shellcheck shell=bash
# A job folder belongs to one record: the one whose owner token its `.owner` file holds.
# claim_folder DIR TOKEN: claim DIR for TOKEN when nobody has (atomically: the token is
# written to a file of its own, then linked into place, so a reader never sees half of
# it), then succeed only when DIR is TOKEN's. An empty TOKEN (a record from before owner
# tokens, whose ids are shorter than any minted since) claims and checks nothing.
# shellcheck disable=SC2317 # a library: not every script calls every function
claim_folder() {
  local dir=$1 token=$2 tmp owner=
  [ -n "$token" ] || return 0
  if [ ! -e "$dir/.owner" ]; then
    tmp=$dir/.owner.$BASHPID.$RANDOM
    printf '%s\n' "$token" >"$tmp" && ln -- "$tmp" "$dir/.owner" 2>/dev/null
    rm -f -- "$tmp"
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
# shellcheck disable=SC2317 # a library: not every script calls every function
folder_owner() {
  owner=
  IFS= read -r -n 200 owner 2>/dev/null <"$1/.owner" || :
}
