#!/bin/sh
# The main job, from a fresh Debian 12 machine: installs what is missing,
# builds fzd and fzctl, starts fzd (on the GPU when this build and machine have
# one, else on the CPU backend), compresses a real field with `fzctl submit`,
# prints the ratio and the max error, decompresses it again, and stops fzd.
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh libncarg-data python3-netcdf4
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" >/dev/null

work=$(mktemp -d)
fzd_pid=""
cleanup() {
  [ -n "$fzd_pid" ] && kill -TERM "$fzd_pid" 2>/dev/null && wait "$fzd_pid" || :
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

field=$(/usr/bin/python3 tests/data/ncar_field.py "$work")
sock="$work/fzd.sock"
build/daemon/fzd --socket "$sock" --backend auto 2>"$work/fzd.log" &
fzd_pid=$!
tries=0
until build/client/fzctl -S "$sock" ping -c 1 >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -gt 100 ] || ! kill -0 "$fzd_pid" 2>/dev/null; then
    cat "$work/fzd.log" >&2
    echo "demo: fzd did not come up" >&2
    exit 2
  fi
  sleep 0.1
done
build/client/fzctl -S "$sock" status

shape=$(basename "$field" .f32 | sed 's/^[a-z]*_//')
echo "== compress $(basename "$field") ($shape f32), balanced, REL 1e-3"
build/client/fzctl -S "$sock" submit -q --json --verify -t f32 -s "$shape" \
  -p balanced -e 1e-3 -m rel "$field" | tee "$work/result.json"
/usr/bin/python3 - "$work/result.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[0])
print("ratio %.2f, max error %.6g (bound: 1e-3 of the value range)" % (r["ratio"], r["max_error"]))
PY
echo "== decompress"
build/client/fzctl -S "$sock" submit -q -d -o "$work/back.f32" "$field.fz"
/usr/bin/python3 - "$field" "$work/back.f32" <<'PY'
import sys
import numpy as np
a, b = np.fromfile(sys.argv[1], "<f4"), np.fromfile(sys.argv[2], "<f4")
rng = float(a.max() - a.min())
err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
print("decompressed %d values; max error %.6g = %.4f of the REL bound" % (a.size, err, err / (1e-3 * rng)))
sys.exit(0 if err <= 1e-3 * rng else 1)
PY
