#!/bin/sh
# The systemd units and the default configuration, checked the way an
# installation uses them (items 22 and 23 of issue 10):
#  - `systemd-analyze verify` of fzd.socket, fzd.service and instances of
#    fzd@.service and fzd@.socket reports nothing: the units parse, their ExecStart= binary
#    exists (a copy of the units names the built fzd) and their
#    Documentation= man pages are found (MANPATH names the build's pages);
#  - `systemd-analyze security --offline=true` rates each service 3.0 or
#    lower, and neither uses the two settings that would break the GPU
#    backend (PrivateDevices=, MemoryDenyWriteExecute=);
#  - the default /etc/fzd/fzd.json passes `fzd --check-config`, and fzd
#    started with it as fzd.service starts it (with a socket path of our own
#    instead of the socket systemd would pass) answers fzctl.
# Neither verify nor security --offline needs systemd running as PID 1, so
# this runs in a container.  Exit status 77 (skipped) where there is no
# systemd-analyze; tests/deps.sh installs it on CI.
#   systemd_test.sh SOURCE_DIR FZD FZCTL MAN_DIR   (MAN_DIR holds man1/ and man8/)
set -eu
src=$1
fzd=$2
fzctl=$3
man=$4
# systemd wants an absolute ExecStart= path.
case $fzd in /*) ;; *) fzd=$PWD/$fzd ;; esac
if ! command -v systemd-analyze > /dev/null 2>&1; then
  echo "SKIPPED: systemd-analyze not found (Debian package systemd)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fzd-systemd-XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0

mkdir -p "$tmp/units"
for u in fzd.service fzd@.service fzd.socket fzd@.socket; do
  sed "s#/usr/bin/fzd#$fzd#g" "$src/systemd/$u" > "$tmp/units/$u"
done

# verify looks the Documentation= pages up with man(1); without it (Debian
# package man-db) only that part is left out, test_man_pages still runs.
man_opt=--man=yes
if ! command -v man > /dev/null 2>&1; then
  echo "note: man not found: Documentation= pages not looked up"
  man_opt=--man=no
fi
cp "$tmp/units/fzd@.socket" "$tmp/units/fzd@0.socket"
if ! MANPATH="$man" systemd-analyze verify "$man_opt" "$tmp/units/fzd.socket" \
  "$tmp/units/fzd.service" "$tmp/units/fzd@0.service" "$tmp/units/fzd@0.socket" \
  > "$tmp/verify.log" 2>&1 ||
  [ -s "$tmp/verify.log" ]; then
  echo "FAIL: systemd-analyze verify:"
  cat "$tmp/verify.log"
  fail=1
fi

for u in fzd.service fzd@.service; do
  set +e
  systemd-analyze security --offline=true --threshold=30 "$tmp/units/$u" > "$tmp/security.log" 2>&1
  rc=$?
  set -e
  level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/security.log")
  echo "$u: exposure ${level:-unknown}"
  if [ "$rc" -ne 0 ] || [ -z "$level" ] ||
    ! awk -v l="$level" 'BEGIN { exit !(l <= 3.0) }'; then
    echo "FAIL: $u: exposure above 3.0 (status $rc):"
    grep '✗' "$tmp/security.log" || cat "$tmp/security.log"
    fail=1
  fi
  if grep -Eq '^(PrivateDevices|MemoryDenyWriteExecute)=(yes|true|on|1)' "$src/systemd/$u"; then
    echo "FAIL: $u hides the GPU or refuses W+X memory (PrivateDevices=/MemoryDenyWriteExecute=)"
    fail=1
  fi
  if ! grep -q '^DeviceAllow=char-nvidia\* rw$' "$src/systemd/$u"; then
    echo "FAIL: $u does not allow the NVIDIA device nodes"
    fail=1
  fi
done

conf="$src/systemd/fzd.json"
if ! out=$("$fzd" --check-config "$conf" 2>&1); then
  echo "FAIL: fzd --check-config $conf: $out"
  fail=1
fi

# A fresh start with the default file: the daemon comes up and answers.
"$fzd" --config "$conf" --socket "$tmp/fzd.sock" > "$tmp/fzd.log" 2>&1 &
pid=$!
up=0
i=0
while [ "$i" -lt 600 ]; do
  if [ -S "$tmp/fzd.sock" ] && "$fzctl" -S "$tmp/fzd.sock" ping -c 1 > /dev/null 2>&1; then
    up=1
    break
  fi
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
  i=$((i + 1))
done
if [ "$up" -ne 1 ]; then
  echo "FAIL: fzd with the default configuration did not answer within 60 s:"
  cat "$tmp/fzd.log"
  fail=1
fi
kill -TERM "$pid" 2> /dev/null || true
set +e
wait "$pid"
rc=$?
set -e
pid=""
if [ "$up" -eq 1 ] && [ "$rc" -ne 0 ]; then
  echo "FAIL: fzd exited with status $rc after SIGTERM:"
  cat "$tmp/fzd.log"
  fail=1
fi

[ "$fail" -eq 0 ] && echo "units verified, exposure at most 3.0, default configuration starts: ok"
exit "$fail"
