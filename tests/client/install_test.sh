#!/bin/sh
# Installs the build tree into a temporary prefix and builds a program
# against the installed libfzclient with find_package(fzclient) and with
# pkg-config, shared and static, then runs each (a version check, and an
# ECONNREFUSED from an address where nothing listens).
#   install_test.sh BUILD_DIR SOURCE_DIR [CMAKE_GENERATOR]
set -eu
build=$1
src=$2
gen=${3:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fzclient-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" --component fzclient > "$tmp/install.log"
test -f "$tmp/prefix/include/fzclient.h"
test -f "$tmp/prefix/include/fz_error.h"
libdir=$(ls -d "$tmp"/prefix/lib*/cmake/fzclient | head -n1)
libdir=$(dirname "$(dirname "$libdir")")
test -L "$libdir/libfzclient.so.0"
test -f "$libdir/libfzclient.a"
test -f "$libdir/pkgconfig/fzclient.pc"
PKG_CONFIG_PATH="$libdir/pkgconfig" cmake ${gen:+-G "$gen"} -S "$src/tests/client/consumer" -B "$tmp/consumer" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_RPATH="$libdir" > "$tmp/configure.log"
cmake --build "$tmp/consumer" > "$tmp/build.log"
for exe in consumer_cmake consumer_static consumer_pkgconfig; do
  out=$("$tmp/consumer/$exe")
  case "$out" in
    "fzclient "*) ;;
    *) echo "FAIL: $exe printed '$out'"; exit 1 ;;
  esac
  # Nothing listens there: the library must say so with exit status 2.
  set +e
  "$tmp/consumer/$exe" "unix:$tmp/nobody.sock" 2> "$tmp/err"
  rc=$?
  set -e
  if [ "$rc" -ne 2 ] || ! grep -q ECONNREFUSED "$tmp/err"; then
    echo "FAIL: $exe against no daemon: status $rc, $(cat "$tmp/err")"
    exit 1
  fi
done
echo "installed libfzclient found by find_package and pkg-config: ok"
