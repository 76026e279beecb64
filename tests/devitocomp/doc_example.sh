#!/bin/sh
# Checks that a docs page holds a source file verbatim: the fenced block that
# follows the line "<!-- example: PATH -->" in DOC (argument 1) must equal
# FILE (argument 2), so the example the page shows is the one the tests run.
set -eu
doc=$1
file=$2
name=$(basename "$file")
block=$(awk -v name="$name" '
  index($0, "<!-- example: ") == 1 && index($0, name " -->") { want = 1; next }
  want && /^```/ { if (inside) exit; inside = 1; next }
  inside { print }' "$doc")
if [ -z "$block" ]; then
  echo "doc_example.sh: $doc has no block marked <!-- example: ... $name -->" >&2
  exit 1
fi
if ! printf '%s\n' "$block" | diff -u "$file" - >&2; then
  echo "doc_example.sh: the example in $doc differs from $file" >&2
  exit 1
fi
