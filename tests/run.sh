#!/bin/sh
# The test command: installs what is missing, builds everything (the CUDA code
# too when nvcc is found) with warnings as errors, and runs every test suite.
# GPU suites report as skipped on a machine without a GPU.  Then the CPU
# product again under sanitizers: every suite against an ASan + UBSan build,
# and the suites that start fzd against a ThreadSanitizer fzd, with the
# engine's threads, the JIT module cache's and the ratio kernels' block
# threads under ThreadSanitizer too.
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs="$(nproc)"
cmake --preset ci
cmake --build --preset ci -j "$jobs"
ctest --preset ci -j "$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer (CPU only)"
cmake --preset ci-asan
cmake --build --preset ci-asan -j "$jobs"
ctest --preset ci-asan -j "$jobs"

echo "== ThreadSanitizer: fzd serving the daemon and client suites, the engine's threads, the ratio kernels' block threads"
cmake --preset ci-tsan
cmake --build --preset ci-tsan -j "$jobs" --target fzd fz_cpu_bench jit_cache_stress \
  test_kernel_ratio_threads
export TSAN_OPTIONS="halt_on_error=1 exitcode=66"
tsan_fzd="$PWD/build-ci-tsan/daemon/fzd"
# Some kernels lay out memory where this ThreadSanitizer cannot start at
# all; that, and only that (its run-time refusing before fzd runs), skips
# the pass, and says so.  Any other failure fails the run.
if ! probe=$("$tsan_fzd" --version 2>&1); then
  case "$probe" in
  *ThreadSanitizer*)
    echo "ThreadSanitizer pass SKIPPED: the sanitizer cannot start on this kernel:"
    echo "$probe" | head -n 3
    exit 0 ;;
  *) echo "$probe" >&2; exit 1 ;;
  esac
fi
FZD_BINARY="$tsan_fzd" ctest --preset ci -j "$jobs" \
  -R '^(test_daemon_|test_libfzclient|test_fzctl|test_peer_)'
for preset in balanced fast lossless; do
  build-ci-tsan/tests/bench/fz_cpu_bench -t 4 -r 1 -p "$preset" -e 1e-3 --gen smooth 262144
done
build-ci-tsan/tests/jit_cache/jit_cache_stress
# The ratio kernels' device code, each block's 256 threads real threads.
build-ci-tsan/tests/gpu/test_kernel_ratio_threads
