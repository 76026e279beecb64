#!/bin/sh
# memory_bench.sh - peak and idle resident memory of a real fzd per job size:
# `fzctl submit` of one float32 file of each size (descriptor input and
# output), compress with --verify and then decompress, each on a fresh fzd
# so that its VmHWM (/proc/PID/status) is that one job's peak.  Also prints
# VmRSS once the daemon is idle again.  Not run by ctest.
#
#   tests/bench/memory_bench.sh BUILD_DIR [SIZES_MIB="256 1024 4096"] [EB=1e-3]
#
# $FZD_BINARY runs another fzd (e.g. an older build, to compare); $TMPDIR
# holds the files (the largest size needs about 2.5 times its size on disk).
set -eu
build=${1:?usage: memory_bench.sh BUILD_DIR [SIZES_MIB] [EB]}
sizes=${2:-256 1024 4096}
eb=${3:-1e-3}
fzd=${FZD_BINARY:-$build/daemon/fzd}
fzctl=$build/client/fzctl
[ -x "$fzd" ] && [ -x "$fzctl" ] || { echo "no fzd or fzctl under $build" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/memory-bench-XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
sock=$work/fzd.sock
printf '{"socket_path": "%s", "backend": "cpu", "log_level": "warning", "max_job_bytes": 8589934592}\n' \
  "$sock" > "$work/fzd.json"

# A 16 MiB smooth field, repeated to each size (its content barely changes
# the memory a job needs; generating gigabytes in pure Python would take
# longer than the jobs).
python3 - "$work/block.f32" <<'PY'
import array, math, sys
n, cols = 4 << 20, 4096
a = array.array("f", (100.0 * math.sin(0.001 * (i // cols)) * math.cos(0.002 * (i % cols))
                      for i in range(n)))
with open(sys.argv[1], "wb") as f:
    a.tofile(f)
PY

status_kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"; }
start_fzd() {
  "$fzd" --config "$work/fzd.json" 2>> "$work/fzd.log" &
  pid=$!
  until "$fzctl" -S "$sock" ping -c 1 > /dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/fzd.log" >&2; exit 1; }
    sleep 0.01
  done
}
stop_fzd() { kill -TERM "$pid"; wait "$pid"; pid=""; }
# Runs one fzctl submit on a fresh fzd and prints a row of the table.
measure() {
  label=$1
  shift
  start_fzd
  base=$(status_kib VmRSS)
  t0=$(date +%s.%N)
  "$fzctl" -S "$sock" submit -q -f "$@"
  t1=$(date +%s.%N)
  peak=$(status_kib VmHWM)
  sleep 1
  idle=$(status_kib VmRSS)
  stop_fzd
  awk -v l="$label" -v b="$base" -v p="$peak" -v i="$idle" -v t0="$t0" -v t1="$t1" 'BEGIN {
    printf "%-24s %10.1f %10.1f %10.1f %8.2f\n", l, b / 1024, p / 1024, i / 1024, t1 - t0 }'
}

echo "memory_bench: $("$fzd" --version 2>/dev/null || echo "$fzd"), CPU backend, f32, REL $eb"
echo "$(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), $(date -u +%Y-%m-%dT%H:%MZ)"
printf "%-24s %10s %10s %10s %8s\n" job "start MiB" "peak MiB" "idle MiB" seconds
for mib in $sizes; do
  in=$work/in.f32
  : > "$in"
  i=0
  while [ "$i" -lt $((mib / 16)) ]; do cat "$work/block.f32" >> "$in"; i=$((i + 1)); done
  measure "compress $mib MiB" --dtype f32 -e "$eb" --verify -o "$work/in.fz" "$in"
  measure "decompress $mib MiB" -d -o "$work/back.f32" "$work/in.fz"
  rm -f "$in" "$work/in.fz" "$work/back.f32"
done
