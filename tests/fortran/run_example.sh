#!/bin/sh
# Runs the Fortran example (client/fortran/fzd_example.f90) against a real
# fzd on the CPU backend: starts FZD (argument 1) with a private config in a
# temporary directory, waits for its socket, runs EXAMPLE (argument 2, with
# the arguments after it) with FZD_SOCKET naming it, then stops the daemon
# with SIGTERM and requires a clean exit.  The example's own exit status
# says whether the bound held.
set -eu
fzd=$1
example=$2
shift 2
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
sock=$tmp/fzd.sock
printf '{"socket_path": "%s", "backend": "cpu", "workers": 1}\n' "$sock" >"$tmp/fzd.json"
"$fzd" --config "$tmp/fzd.json" 2>"$tmp/fzd.log" &
pid=$!
# Up to 60 s for the socket on a loaded machine.
i=0
while [ ! -S "$sock" ]; do
  if ! kill -0 "$pid" 2>/dev/null || [ $i -ge 600 ]; then
    echo "run_example.sh: fzd did not start" >&2
    cat "$tmp/fzd.log" >&2
    exit 1
  fi
  sleep 0.1
  i=$((i + 1))
done
rc=0
FZD_SOCKET="unix:$sock" "$example" "$@" || rc=$?
kill -TERM "$pid"
st=0
wait "$pid" || st=$?
pid=""
if [ "$st" -ne 0 ]; then
  echo "run_example.sh: fzd exited with status $st" >&2
  cat "$tmp/fzd.log" >&2
  exit 1
fi
exit "$rc"
