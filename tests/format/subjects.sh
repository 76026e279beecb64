#!/bin/sh
# Checks that every commit subject since the layout rules were set (commit
# 9723a0c and its descendants) is at most 72 characters, as git's and the
# kernel's own are: the detail goes in the body.  Outside a clone (a source
# tarball, or a shallow clone without that commit) there is no history to
# check: exit 77, which ctest reports as skipped.
#   usage: subjects.sh SOURCE_DIR
set -eu
cd "$1"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 77
since=9723a0c
if ! git cat-file -e "$since^{commit}" 2>/dev/null; then
  if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    echo "a shallow clone: commit $since is not here, nothing to check" >&2
    exit 77
  fi
  echo "commit $since is not in this clone's history" >&2
  exit 1
fi
long="$(git log --format='%h %s' "$since^..HEAD" | awk 'length($0) - length($1) - 1 > 72')"
if [ -n "$long" ]; then
  echo "commit subjects longer than 72 characters:" >&2
  echo "$long" >&2
  exit 1
fi
