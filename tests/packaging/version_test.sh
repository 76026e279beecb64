#!/bin/sh
# fzd, fzctl and libfzclient print one version, the one CMake's project()
# sets (item 21 of issue 10: fzd said 0.1.0 while the client said 0.2.0).
#   version_test.sh VERSION FZD FZCTL
set -eu
want=$1
fzd=$2
fzctl=$3
fail=0
out=$("$fzd" --version)
case "$out" in
"fzd $want ("*"engine $want)") ;;
*) echo "FAIL: fzd --version printed '$out', expected fzd $want ... engine $want"; fail=1 ;;
esac
# fzctl prints the version of the libfzclient it runs with.
out=$("$fzctl" --version)
if [ "$out" != "fzctl $want" ]; then
  echo "FAIL: fzctl --version printed '$out', expected 'fzctl $want'"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "fzd, fzctl, libfzclient and the engine are version $want: ok"
exit "$fail"
