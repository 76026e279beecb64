#!/bin/sh
# `cmake --install` puts the service where systemd, man and bash-completion
# look (items 22 and 23 of issue 10): the units naming the installed fzd,
# the default configuration in /etc/fzd (kept, not overwritten, on a second
# install), fzd(8), fzctl(1) and fzctl's completion.  Installs into a
# DESTDIR with prefix /usr, as a package would.
#   install_test.sh BUILD_DIR
set -eu
build=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fzd-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
DESTDIR="$tmp/root" cmake --install "$build" --prefix /usr > "$tmp/install.log"
r="$tmp/root"
for f in usr/bin/fzd usr/bin/fzctl etc/fzd/fzd.json \
  usr/lib/systemd/system/fzd.service usr/lib/systemd/system/fzd@.service \
  usr/lib/systemd/system/fzd@.socket \
  usr/lib/systemd/system/fzd.socket usr/lib/sysusers.d/fzd.conf usr/lib/tmpfiles.d/fzd.conf \
  usr/share/man/man8/fzd.8 usr/share/man/man1/fzctl.1 \
  usr/share/bash-completion/completions/fzctl; do
  if [ ! -f "$r/$f" ]; then
    echo "FAIL: cmake --install did not install /$f"
    fail=1
  fi
done
if ! grep -q '^ExecStart=/usr/bin/fzd --config /etc/fzd/fzd.json$' \
  "$r/usr/lib/systemd/system/fzd.service"; then
  echo "FAIL: the installed fzd.service does not start /usr/bin/fzd with /etc/fzd/fzd.json"
  fail=1
fi
if grep -q '@' "$r/usr/share/man/man8/fzd.8" "$r/usr/share/man/man1/fzctl.1" &&
  grep -E '@[A-Z_]+@' "$r/usr/share/man/man8/fzd.8" "$r/usr/share/man/man1/fzctl.1"; then
  echo "FAIL: an installed man page has an unreplaced @VARIABLE@"
  fail=1
fi
# An administrator's configuration survives a second install.
echo '{"log_level": "debug"}' > "$r/etc/fzd/fzd.json"
DESTDIR="$tmp/root" cmake --install "$build" --prefix /usr > "$tmp/install2.log"
if [ "$(cat "$r/etc/fzd/fzd.json")" != '{"log_level": "debug"}' ]; then
  echo "FAIL: a second cmake --install overwrote /etc/fzd/fzd.json"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "cmake --install installs the units, configuration, man pages, completion: ok"
exit "$fail"
