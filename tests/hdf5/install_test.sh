#!/bin/sh
# `cmake --install --component hdf5` with prefix /usr puts libh5z_fzd.so
# where Debian's HDF5 looks for plugins when HDF5_PLUGIN_PATH is unset (the
# PluginDir of its .pc file), and h5z_fzd.h with the headers.  Into a
# DESTDIR, as a package would.
#   install_test.sh BUILD_DIR PKG_CONFIG_MODULE
set -eu
build=$1
module=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fzd-hdf5-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
DESTDIR="$tmp/root" cmake --install "$build" --prefix /usr --component hdf5 > "$tmp/log"
dir=$(pkg-config --variable PluginDir "$module")
[ -n "$dir" ] || dir="$(pkg-config --variable libdir "$module")/plugins"
fail=0
for f in "$dir/libh5z_fzd.so" "$dir/libh5z_fzd_legacy.so" /usr/include/h5z_fzd.h; do
  if [ ! -f "$tmp/root$f" ]; then
    echo "FAIL: cmake --install did not install $f; it installed:"
    find "$tmp/root" -type f
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "plugin installed in $dir: ok"
exit "$fail"
