#!/bin/sh
# jit_bench.sh - what the JIT costs a client of fzd: the first job of a new
# chain and shape on a fresh daemon with an empty module cache (NVRTC
# compile, module load, plan and its memory), the warm job after it, and
# the first job on a restarted daemon that finds the modules in its cache
# directory (no compile: a load and a plan).  Each is fzd's own time for
# the job (server_time_ms of `fzctl submit --json`) and the client's wall
# time; the JIT's counters from `fzctl stats --json` after each daemon.
# Not run by ctest.
#
#   tests/bench/jit_bench.sh BUILD_DIR [PIPELINE="quant | diff | rze"] [MIB=64] [JOBS=5]
#
# $FZD_BACKEND picks the backend (default gpu; on the CPU backend there is
# no JIT and the three figures are the plan's alone).  $TMPDIR holds the
# field and the cache directory.
set -eu
build=${1:?usage: jit_bench.sh BUILD_DIR [PIPELINE] [MIB] [JOBS]}
pipeline=${2:-quant | diff | rze}
mib=${3:-64}
jobs=${4:-5}
fzd=${FZD_BINARY:-$build/daemon/fzd}
fzctl=$build/client/fzctl
backend=${FZD_BACKEND:-gpu}
[ -x "$fzd" ] && [ -x "$fzctl" ] || { echo "no fzd or fzctl under $build" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/jit-bench-XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
sock=$work/fzd.sock
printf '{"socket_path": "%s", "backend": "%s", "log_level": "warning", "jit_cache_dir": "%s"}\n' \
  "$sock" "$backend" "$work/jit" > "$work/fzd.json"

cols=4096
rows=$((mib * 262144 / cols))
python3 - "$work/f.f32" "$rows" "$cols" <<'PY'
import array, math, sys
rows, cols = int(sys.argv[2]), int(sys.argv[3])
n = rows * cols
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

start_fzd() {
  "$fzd" --config "$work/fzd.json" 2>> "$work/fzd.log" &
  pid=$!
  until "$fzctl" -S "$sock" ping -c 1 > /dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/fzd.log" >&2; exit 1; }
    sleep 0.005
  done
}
stop_fzd() { kill -TERM "$pid"; wait "$pid"; pid=""; }
# One job: "server_ms wall_ms" of fzctl's JSON line.
job() {
  "$fzctl" -S "$sock" submit -q -f --json -t f32 -s "${rows}x$cols" -e 1e-3 -m rel \
    -p "$pipeline" -o "$work/f.fz" "$work/f.f32" |
    python3 -c 'import json, sys; r = json.loads(sys.stdin.readline()); print("%.3f %.3f" % (r["server_time_ms"], r["time_ms"]))'
}
jit() {
  "$fzctl" -S "$sock" stats --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
j = s.get("jit")
print("no JIT (CPU backend)" if j is None else
      "compiles %d (%d ms), disk hits %d, disk writes %d, memory hits %d" %
      (j["compiles"], j["compile_ms"], j["disk_hits"], j["disk_writes"], j["mem_hits"]))'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "jit_bench: '$pipeline', f32 ${rows}x$cols ($mib MiB), REL 1e-3, backend $backend"
start_fzd
first=$(job)
warm=$(i=0; while [ "$i" -lt "$jobs" ]; do job; i=$((i + 1)); done)
fresh_jit=$(jit)
stop_fzd
start_fzd
restarted=$(job)
restarted_jit=$(jit)
stop_fzd

printf '| job | fzd ms | client ms |\n|---|---|---|\n'
printf '| first, fresh daemon, empty cache | %s | %s |\n' $first
printf '| warm (median of %d) | %s | %s |\n' "$jobs" \
  "$(echo "$warm" | awk '{ print $1 }' | median)" "$(echo "$warm" | awk '{ print $2 }' | median)"
printf '| first, restarted daemon, cache on disk | %s | %s |\n' $restarted
echo "fresh daemon: $fresh_jit"
echo "restarted daemon: $restarted_jit"
