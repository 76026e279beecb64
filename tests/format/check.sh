#!/bin/sh
# Checks that the C and CUDA sources follow .clang-format.  Files written
# before the layout was fixed are listed in tests/format/legacy.txt and keep
# their hand layout; every other source, and so every new one, must be as
# clang-format writes it.  A listed file that is gone, or that already
# follows the layout, is an error too, so the list only ever shrinks.
#   usage: check.sh SOURCE_DIR [CLANG_FORMAT]
set -eu
src="$1"
cf="${2:-clang-format}"
cd "$src"
legacy=tests/format/legacy.txt
fail=0
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
# The sources: git's list where this is a clone, else the tree itself.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh'
else
  find . -path ./build\* -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
    -type f -print | sed 's|^\./||'
fi | grep -v '^tests/fuzz/corpus' | sort > "$tmp"
while read -r f; do
  [ -f "$f" ] || continue
  if grep -qxF "$f" "$legacy"; then
    continue
  fi
  if ! "$cf" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "$f: not in the layout of .clang-format; run: $cf -i $f" >&2
    fail=1
  fi
done < "$tmp"
while read -r f; do
  if [ ! -f "$f" ]; then
    echo "$legacy: $f no longer exists; remove it from the list" >&2
    fail=1
  elif "$cf" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "$legacy: $f now follows the layout; remove it from the list" >&2
    fail=1
  fi
done < "$legacy"
exit "$fail"
