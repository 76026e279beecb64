#!/bin/sh
# Each benchmark answers --help and -h with its usage on stdout and exit
# status 0, without touching a GPU or reading input.
#   bench_help_test.sh BENCH...
set -eu
fail=0
for bench in "$@"; do
  name=$(basename "$bench")
  for opt in --help -h; do
    set +e
    out=$("$bench" "$opt" 2>/dev/null)
    rc=$?
    set -e
    case "$rc:$out" in
    "0:usage: $name "*) ;;
    *) echo "FAIL: $name $opt: exit status $rc, stdout '$(echo "$out" | head -n 1)'"; fail=1 ;;
    esac
  done
done
[ "$fail" -eq 0 ] && echo "$# benchmarks answer --help: ok"
exit "$fail"
