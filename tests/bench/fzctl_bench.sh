#!/bin/sh
# fzctl_bench.sh - `fzctl submit` of N files of M MiB against one running fzd,
# against a fresh one-shot process per file (start fzd, submit the one file,
# stop it: what every job pays when the compressor is a one-shot program,
# e.g. CUDA context creation on a GPU).  Not run by ctest.
#
#   tests/bench/fzctl_bench.sh BUILD_DIR [NFILES=100] [MIB=64] [EB=1e-3] [JOBS=8]
#
# $FZD_BACKEND picks the backend (default auto); $TMPDIR holds the files.
set -eu
build=${1:?usage: fzctl_bench.sh BUILD_DIR [NFILES] [MIB] [EB] [JOBS]}
nfiles=${2:-100}
mib=${3:-64}
eb=${4:-1e-3}
jobs=${5:-8}
fzd=${FZD_BINARY:-$build/daemon/fzd}
fzctl=$build/client/fzctl
backend=${FZD_BACKEND:-auto}
[ -x "$fzd" ] && [ -x "$fzctl" ] || { echo "no fzd or fzctl under $build" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fzctl-bench-XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
sock=$work/fzd.sock
printf '{"socket_path": "%s", "backend": "%s", "log_level": "warning"}\n' \
  "$sock" "$backend" > "$work/fzd.json"

# One smooth float32 field, copied N times (the content does not change the
# cost of a file much; generating N distinct fields would dominate the run).
python3 - "$work/f0.f32" "$mib" <<'PY'
import array, math, sys
n = int(sys.argv[2]) * 262144
cols = 4096
try:  # the same field, much faster where numpy is installed
    import numpy as np
    i = np.arange(n, dtype=np.int64)
    a = (100.0 * np.sin(0.001 * (i // cols)) * np.cos(0.002 * (i % cols))).astype(np.float32)
except ImportError:
    a = array.array("f", (100.0 * math.sin(0.001 * (i // cols)) * math.cos(0.002 * (i % cols))
                          for i in range(n)))
with open(sys.argv[1], "wb") as f:
    a.tofile(f)
PY
i=1
while [ "$i" -lt "$nfiles" ]; do cp "$work/f0.f32" "$work/f$i.f32"; i=$((i + 1)); done
files=$(i=0; while [ "$i" -lt "$nfiles" ]; do printf '%s ' "$work/f$i.f32"; i=$((i + 1)); done)

now() { date +%s.%N; }
start_fzd() {
  "$fzd" --config "$work/fzd.json" 2>> "$work/fzd.log" &
  pid=$!
  until "$fzctl" -S "$sock" ping -c 1 > /dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/fzd.log" >&2; exit 1; }
    sleep 0.005
  done
}
stop_fzd() { kill -TERM "$pid"; wait "$pid"; pid=""; }
submit() { "$fzctl" -S "$sock" submit -q -f -j "$jobs" --dtype f32 --eb "$eb" "$@"; }

echo "fzctl_bench: $nfiles files of $mib MiB, f32, REL $eb, backend $backend, -j $jobs"

start_fzd
"$fzctl" -S "$sock" status | sed -n 's/^backend */backend: /p'
t0=$(now)
submit $files
t1=$(now)
stop_fzd
running=$(awk "BEGIN { print $t1 - $t0 }")

t0=$(now)
for f in $files; do
  start_fzd
  submit "$f"
  stop_fzd
done
t1=$(now)
oneshot=$(awk "BEGIN { print $t1 - $t0 }")

awk -v r="$running" -v o="$oneshot" -v mib="$((nfiles * mib))" 'BEGIN {
  printf "running fzd:        %8.2f s  (%7.1f MiB/s)\n", r, mib / r
  printf "one-shot per file:  %8.2f s  (%7.1f MiB/s)\n", o, mib / o
  printf "speed-up:           %8.2f x\n", o / r
}'
