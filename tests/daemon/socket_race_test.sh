#!/bin/sh
# The Unix socket's set-up against a racing path (issue 27, item 3), and
# where a plain fzd listens.
#
# 1. A racer swaps a link to a victim file in at socket_path the moment a
#    socket appears there while fzd starts and stops STARTS times (100 by default; the
#    FZD_RACE_STARTS variable sets it).  fzd used to bind, then chown and
#    chmod the socket by path, following the link: the victim got the
#    socket's group and mode.  Now the socket is made in a private
#    directory and renamed into place, so the victim must never change,
#    whether or not a start succeeds.
# 2. A socket directory that other users can write, or that another user
#    owns, is refused at start with a log line that names it.
# 3. As root: a plain `fzd` of a user who cannot use /run/fzd listens at
#    $XDG_RUNTIME_DIR/fzd/fzd.sock (directory mode 0700) and logs where.
set -eu
fzd=${1:?usage: socket_race_test.sh FZD SOCKET_RACER}
racer_bin=${2:?usage: socket_race_test.sh FZD SOCKET_RACER}
starts=${FZD_RACE_STARTS:-100}
work=$(mktemp -d)
racer=
pid=
cleanup() {
  [ -n "$racer" ] && kill "$racer" 2> /dev/null
  [ -n "$pid" ] && kill -KILL "$pid" 2> /dev/null
  wait 2> /dev/null
  chmod -R u+rwx "$work" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

mkdir "$work/run"
chmod 0755 "$work/run"
victim=$work/victim
echo secret > "$victim"
chmod 0600 "$victim"
group=nogroup
getent group "$group" > /dev/null || group=$(id -gn)
before=$(stat -c '%a %U %G' "$victim")
cat > "$work/fzd.json" << EOF
{"socket_path": "$work/run/fzd.sock", "socket_mode": "0664", "socket_group": "$group",
 "backend": "cpu", "workers": 1, "log_level": "info"}
EOF

# Starts fzd, waits until it listens or exits (at most 5 s), stops it.
# Prints "up" or "refused".
one_start() {
  : > "$work/log" # not the last run's " ready: "
  "$fzd" --config "$work/fzd.json" > "$work/log" 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 500 ]; do
    if ! kill -0 "$pid" 2> /dev/null; then
      wait "$pid" || true
      echo refused
      return
    fi
    if grep -q " ready: " "$work/log"; then
      break
    fi
    sleep 0.01
    i=$((i + 1))
  done
  kill -TERM "$pid" 2> /dev/null || true
  wait "$pid" || true
  echo up
}

# 1. The race.
# The racer (socket_racer.c) renames a link to the victim over the socket
# the moment its name appears, as an attacker watching with inotify would.
"$racer_bin" "$work/run" fzd.sock "$victim" &
racer=$!
up=0
n=0
while [ $n -lt "$starts" ]; do
  r=$(one_start)
  [ "$r" = up ] && up=$((up + 1))
  now=$(stat -c '%a %U %G' "$victim")
  [ "$now" = "$before" ] || fail "start $n: the victim changed from '$before' to '$now'"
  [ "$(cat "$victim")" = secret ] || fail "start $n: the victim's content changed"
  rm -f "$work/run/fzd.sock" # the racer's link: every start gets a free path
  n=$((n + 1))
done
[ "$up" -gt $((starts / 2)) ] || fail "only $up of $starts starts listened"
kill "$racer"
wait "$racer" 2> /dev/null || true
racer=
sleep 0.1
rm -f "$work/run/.racer-link"
ls -a "$work/run" | grep -q '^\.fzd-' && fail "a private directory was left behind: $(ls -a "$work/run")"
echo "race: $starts starts ($up listened, the racer replaced each socket with its link); the victim is still $before"

# Without the racer, fzd listens with the socket's mode and group.
rm -f "$work/run/fzd.sock"
[ "$(one_start)" = up ] || fail "fzd did not start without the racer: $(cat "$work/log")"
: > "$work/log"
"$fzd" --config "$work/fzd.json" > "$work/log" 2>&1 &
pid=$!
i=0
# READY comes after the signal handlers: a SIGTERM before them would kill.
while ! grep -q " ready: " "$work/log" && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
got=$(stat -c '%a %G' "$work/run/fzd.sock")
kill -TERM "$pid"
wait "$pid" || fail "fzd did not exit cleanly: $(cat "$work/log")"
pid=
[ "$got" = "664 $group" ] || fail "the socket is '$got', not '664 $group'"

# 2. Directories other users could write, or another user's.
for mode in 0775 0757 1777; do
  chmod "$mode" "$work/run"
  if timeout 10 "$fzd" --config "$work/fzd.json" > "$work/log" 2>&1; then
    fail "fzd started with a socket directory of mode $mode"
  fi
  grep -q "socket directory $work/run is writable by its group or by others" "$work/log" ||
    fail "no log line for mode $mode: $(cat "$work/log")"
done
chmod 0755 "$work/run"
if [ "$(id -u)" -eq 0 ]; then
  chown 4242 "$work/run"
  if timeout 10 "$fzd" --config "$work/fzd.json" > "$work/log" 2>&1; then
    fail "fzd started in a directory of uid 4242"
  fi
  grep -q "belongs to uid 4242" "$work/log" || fail "no log line for uid 4242: $(cat "$work/log")"
  chown 0 "$work/run"
fi
echo "directories: group-, world-writable and foreign ones refused"

# 3. A plain fzd of a user without /run/fzd.
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv > /dev/null || [ -e /run/fzd ] ||
  ! setpriv --reuid=4242 --regid=4242 --clear-groups "$fzd" --version > /dev/null 2>&1; then
  echo "XDG_RUNTIME_DIR fallback: not tried (needs root, setpriv, no /run/fzd, and an fzd" \
    "that uid 4242 may run)"
  exit 0
fi
chmod 0755 "$work"
mkdir "$work/xdg"
chown 4242:4242 "$work/xdg"
chmod 0700 "$work/xdg"
: > "$work/log"
env -i PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$work/xdg" \
  setpriv --reuid=4242 --regid=4242 --clear-groups "$fzd" --backend cpu > "$work/log" 2>&1 &
pid=$!
i=0
while ! grep -q " ready: " "$work/log" && [ $i -lt 1000 ] && kill -0 "$pid" 2> /dev/null; do
  sleep 0.01
  i=$((i + 1))
done
[ -S "$work/xdg/fzd/fzd.sock" ] || fail "no socket under XDG_RUNTIME_DIR: $(cat "$work/log")"
dmode=$(stat -c '%a %u' "$work/xdg/fzd")
kill -TERM "$pid"
wait "$pid" || fail "fzd did not exit cleanly: $(cat "$work/log")"
pid=
[ "$dmode" = "700 4242" ] || fail "$work/xdg/fzd is '$dmode', not '700 4242'"
grep -q "listening under \$XDG_RUNTIME_DIR instead, at $work/xdg/fzd/fzd.sock" "$work/log" ||
  fail "the log does not say where: $(cat "$work/log")"
[ ! -e /run/fzd ] || fail "a user without rights made /run/fzd"
echo "XDG_RUNTIME_DIR fallback: listens at $work/xdg/fzd/fzd.sock (0700), logged"
