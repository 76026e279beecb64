#!/bin/sh
# Starts a private fzd on the CPU backend and runs fz_daemon_bench against it.
# usage: tests/bench/daemon_bench.sh BUILD_DIR [fz_daemon_bench options]
set -eu
build=${1:?usage: daemon_bench.sh BUILD_DIR [options]}
shift
work=$(mktemp -d)
"$build/daemon/fzd" --socket "$work/fzd.sock" --backend cpu 2>"$work/fzd.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
tries=0
until "$build/client/fzctl" -S "$work/fzd.sock" ping -c 1 >/dev/null 2>&1; do
  tries=$((tries + 1))
  [ "$tries" -lt 100 ] || { cat "$work/fzd.log" >&2; exit 2; }
  sleep 0.1
done
"$build/tests/bench/fz_daemon_bench" -S "$work/fzd.sock" "$@"
