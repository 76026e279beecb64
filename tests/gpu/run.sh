#!/bin/bash
# The GPU runner: on a machine with a GPU (and, when the Debian development
# packages are missing, their .deb files in .deps/), configures and builds the
# CUDA backend, runs the GPU test suites, compute-sanitizer memcheck and
# racecheck on a small case, the GPU benchmark, and prints a short table.
# Logs go to $OUT when it is set (else build-gpu-run/logs).
#
#   tests/gpu/run.sh [FIELDS_DIR]     FIELDS_DIR: *.f32 fields for the bench
#                                      (default: build-fields/ when present)
# Environment: FZ_BENCH_ARGS (extra fz_gpu_bench options, e.g. "-r 3"),
# FZ_GPU_TEST_LARGE_MB (size of the large identity test; 0 skips it),
# FZ_SKIP_TESTS=1 / FZ_SKIP_BENCH=1 / FZ_SKIP_SANITIZERS=1, FZ_SANITIZER_TOOLS
# (default "memcheck racecheck"), FZ_GPU_PROFILE=1 (Nsight Compute, below),
# FZ_GPU_DEVICE_BENCH=1 (device buffers through fzd, below), FZ_GPU_JIT_BENCH=1
# (first, warm and restarted jobs of a chain through fzd, below), FZ_GPU_RUN_SERVICE (below),
# FZ_GPU_BASELINE (a second source tree benchmarked beside this one, below),
# FZ_GPU_FRAMES_BENCH=1 (detector frames on the GPU, below),
# FZ_GPU_BUILD (build directory), FZ_CUDA_FLAGS (extra nvcc flags, e.g. a
# -D of a kernel tuning knob), FZ_CTEST_ARGS (extra ctest options, e.g.
# "-j4" to run the suites four at a time).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${FZ_GPU_BUILD:-$root/build-gpu-run}
logs=${OUT:-$build/logs}
mkdir -p "$logs" "$build"
fields=${1:-$root/build-fields}

if ! pkg-config --exists criterion 2>/dev/null && [ -f .deps/unpack-debs.sh ]; then
  eval "$(bash .deps/unpack-debs.sh .deps)"
fi
# Criterion's .pc names private requirements (libffi, libgit2, nanomsg) whose
# development files the machine may lack; the tests link none of them, so an
# empty .pc for each missing one lets pkg-config answer.
stubs=$build/pkgconfig-stubs
mkdir -p "$stubs"
export PKG_CONFIG_PATH="${PKG_CONFIG_PATH:+$PKG_CONFIG_PATH:}$stubs"
for dep in boxfort libffi libgit2 nanomsg; do
  if ! pkg-config --exists "$dep" 2>/dev/null; then
    printf 'Name: %s\nDescription: stub\nVersion: 0\n' "$dep" > "$stubs/$dep.pc"
  fi
done
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
# The ratio preset's encoder kernels, which plans leave to the CPU engine
# unless asked (docs/gpu.md, "The ratio preset's encoder"): the suites, the
# benchmarks and the daemons here run them, so that they keep being checked.
export FZ_GPU_RATIO_ENCODER="${FZ_GPU_RATIO_ENCODER:-kernels}"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | tee "$logs/gpu.txt"
fi

step() { printf '\n== %s\n' "$*"; }
status=0
summary=()
# run_ctest LABEL LOG CTEST-ARGS...: one selection of suites, its verdict in
# the summary and its log in $logs/LOG.
run_ctest() {
  local label=$1 log=$2
  shift 2
  # shellcheck disable=SC2086
  if ctest --test-dir "$build" ${FZ_CTEST_ARGS:-} "$@" --output-on-failure > "$logs/$log" 2>&1; then
    if grep -q '\*\*\*Skipped' "$logs/$log"; then
      summary+=("$label: SKIPPED, some or all (see $log)")
    else
      summary+=("$label: passed")
    fi
  else
    summary+=("$label: FAILED")
    status=1
  fi
}

# side_build NAME SRC DIR CUDA_FLAGS: a second configuration (source tree
# SRC into DIR, the main build's options but for the CUDA flags) with the
# GPU benchmark built; its logs are configure-NAME.log and build-NAME.log.
side_build() {
  local name=$1 src=$2 dir=$3 flags=$4
  cmake -S "$src" -B "$dir" -G Ninja -DFZ_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_FLAGS="$flags" > "$logs/configure-$name.log" 2>&1 ||
    { tail -30 "$logs/configure-$name.log"; exit 1; }
  cmake --build "$dir" -j16 --target fz_gpu_bench > "$logs/build-$name.log" 2>&1 ||
    { tail -40 "$logs/build-$name.log"; exit 1; }
}

# The suites that start fzd on the GPU (the service part below).
service_suites='^test_gpu_(service|device_memory|client_device|warm|ratio)$'

step configure and build
# A profile maps samples to source lines (-lineinfo changes no code).
cuda_flags=${FZ_CUDA_FLAGS:-}
[ "${FZ_GPU_PROFILE:-0}" != 0 ] && cuda_flags="$cuda_flags -lineinfo"
cmake -S . -B "$build" -G Ninja -DFZ_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_FLAGS="$cuda_flags" \
  > "$logs/configure.log" 2>&1 || { tail -30 "$logs/configure.log"; exit 1; }
cmake --build "$build" -j16 --target fzkernels test_gpu_identity test_gpu_hostile \
  test_gpu_large test_gpu_jit test_gpu_ratio fz_gpu_bench test_gpu_frames test_kernel_frames \
  fzd test_daemon_frames_method test_daemon_frames_output \
  > "$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
echo "built"

if [ "${FZ_SKIP_TESTS:-0}" != 1 ]; then
  step GPU test suites
  # test_gpu_frames and its CPU model test_kernel_frames (kernels/frames).
  run_ctest "ctest GPU suites" ctest.log -R '^test_(gpu_|kernel_frames$)' -E "$service_suites"
  grep -E "tests passed|Test +#|Passed|Failed|Skipped|SKIP|Synthesis|large:" "$logs/ctest.log" | tail -30
  # The "frames" method's suite against fzd on the GPU backend: its LZ4
  # batches run on kernels/frames and must equal the engine's answers.
  FZD_TEST_BACKEND=gpu run_ctest "frames through fzd (GPU backend)" ctest-frames-fzd.log \
    -R '^test_daemon_frames_(method|output)$'
  grep -E "Test +#|Synthesis|FAIL" "$logs/ctest-frames-fzd.log" | tail -10
  # The lossless-ratio preset on the ratio kernels: test_gpu_ratio's tests
  # of it need no fzd (the whole suite runs with the service below).
  rc=0
  "$build/tests/gpu/test_gpu_ratio" --filter 'ratio/lossless_ratio*' -j1 \
    > "$logs/lossless-ratio.log" 2>&1 || rc=$?
  case $rc in
    0) summary+=("lossless-ratio on the GPU: passed") ;;
    77) summary+=("lossless-ratio on the GPU: SKIPPED (see lossless-ratio.log)") ;;
    *) summary+=("lossless-ratio on the GPU: FAILED (see lossless-ratio.log)"); status=1 ;;
  esac
  grep -E "FAIL|Synthesis" "$logs/lossless-ratio.log" | tail -10

  step compute-sanitizer
  read -r -a tools <<< "${FZ_SANITIZER_TOOLS:-memcheck racecheck}"
  [ "${FZ_SKIP_SANITIZERS:-0}" = 1 ] && tools=()
  for tool in "${tools[@]}"; do
    if compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
         "$build/tests/gpu/test_gpu_identity" --filter 'identity/other_chains' -j1 \
         > "$logs/sanitizer-$tool.log" 2>&1 &&
       compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
         "$build/tests/gpu/test_gpu_identity" --filter 'identity/word32_small' -j1 \
         >> "$logs/sanitizer-$tool.log" 2>&1 &&
       compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
         "$build/tests/gpu/test_gpu_hostile" --filter 'hostile/byte_flips' -j1 \
         >> "$logs/sanitizer-$tool.log" 2>&1 &&
       compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
         "$build/tests/gpu/test_gpu_jit" --filter 'gpu_jit/chain0' -j1 \
         >> "$logs/sanitizer-$tool.log" 2>&1 &&
       compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
         "$build/tests/gpu/test_gpu_jit" --filter 'gpu_jit/chain4' -j1 \
         >> "$logs/sanitizer-$tool.log" 2>&1 &&
       compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
         "$build/tests/gpu_frames/test_gpu_frames" --filter 'gpu_frames/refusals' -j1 \
         >> "$logs/sanitizer-$tool.log" 2>&1 &&
       { [ ! -x "$build/tests/gpu/test_gpu_ratio" ] ||
         compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
           "$build/tests/gpu/test_gpu_ratio" --filter 'ratio/sanitizer_small' -j1 \
           >> "$logs/sanitizer-$tool.log" 2>&1 &&
         compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
           "$build/tests/gpu/test_gpu_ratio" --filter 'ratio/lossless_ratio_sanitizer_small' \
           -j1 >> "$logs/sanitizer-$tool.log" 2>&1; }; then
      summary+=("compute-sanitizer $tool: clean")
    else
      summary+=("compute-sanitizer $tool: ERRORS (see sanitizer-$tool.log)")
      status=1
    fi
    grep -E "ERROR SUMMARY|Synthesis" "$logs/sanitizer-$tool.log" | tail -4
  done
fi

if [ "${FZ_SKIP_BENCH:-0}" != 1 ]; then
  step GPU benchmark
  inputs=()
  if [ -d "$fields" ]; then
    for f in "$fields"/*.f32; do [ -f "$f" ] && inputs+=("$f"); done
  fi
  inputs+=(--gen smooth --gen noise)
  # run_bench LABEL BUILD NAME: BUILD's fz_gpu_bench on the inputs, its
  # table in $logs/NAME.md and its verdict in the summary.
  run_bench() {
    # shellcheck disable=SC2086
    if "$2/tests/bench/fz_gpu_bench" ${FZ_BENCH_ARGS:-} "${inputs[@]}" \
         > "$logs/$3.md" 2> "$logs/$3.err"; then
      summary+=("$1: every bound held")
    else
      summary+=("$1: FAILED (exit $?)")
      status=1
    fi
    cat "$logs/$3.md" "$logs/$3.err"
  }
  run_bench benchmark "$build" bench
  # FZ_GPU_BASELINE=DIR: another source tree of the project (for example
  # `git archive OLD | tar -x -C DIR`), built with the same options in its
  # own directory and benchmarked on the same inputs right after this one,
  # so that a change is timed against its baseline on one machine in one
  # call (a device call may get an H100 or an H200).
  if [ -n "${FZ_GPU_BASELINE:-}" ]; then
    step baseline benchmark: "$FZ_GPU_BASELINE"
    base=$build-baseline
    side_build baseline "$FZ_GPU_BASELINE" "$base" "$cuda_flags"
    run_bench "baseline benchmark" "$base" bench-baseline
  fi
fi

# ---- detector frames ------------------------------------------------------
# FZ_GPU_FRAMES_BENCH=1: tests/bench/frames_gpu_bench.c, Eiger 4M u16 frames
# decoded in batches in process, sparse (cut 10) and dense, and the same
# batches through fzd on the GPU backend (chunks in a file descriptor),
# checked against the CPU engine ($FZ_FRAMES_BENCH_ARGS: e.g. "-f 256 -b
# 64 -r 20").
if [ "${FZ_GPU_FRAMES_BENCH:-0}" != 0 ]; then
  step detector frames on the GPU
  cmake --build "$build" -j16 --target fz_frames_gpu_bench fzd > "$logs/build-frames.log" 2>&1 ||
    { tail -40 "$logs/build-frames.log"; exit 1; }
  work=$(mktemp -d)
  "$build/daemon/fzd" --socket "$work/fzd.sock" --backend gpu 2> "$logs/fzd-frames.log" &
  fzd_pid=$!
  for _ in $(seq 100); do [ -S "$work/fzd.sock" ] && break; sleep 0.1; done
  # shellcheck disable=SC2086
  if "$build/tests/bench/fz_frames_gpu_bench" ${FZ_FRAMES_BENCH_ARGS:-} -S "unix:$work/fzd.sock" \
       > "$logs/frames-gpu-bench.md" 2> "$logs/frames-gpu-bench.err"; then
    summary+=("frames GPU benchmark: identical to the CPU")
  else
    summary+=("frames GPU benchmark: FAILED (exit $?)")
    status=1
  fi
  kill -TERM "$fzd_pid"
  wait "$fzd_pid" || { summary+=("fzd (frames benchmark) exited with $?"); status=1; }
  rm -rf "$work"
  cat "$logs/frames-gpu-bench.md" "$logs/frames-gpu-bench.err"
  tail -5 "$logs/fzd-frames.log"
fi

# ---- kernel profile ------------------------------------------------------
# FZ_GPU_PROFILE=1: Nsight Compute on one compress and one decompress per
# preset ($FZ_PROFILE_PRESETS, default fast,balanced) of the first field
# (or the fz_gpu_bench inputs in $FZ_PROFILE_INPUT, e.g. "--gen noise") at
# REL 1e-3 (or $FZ_PROFILE_EB): each kernel's duration, throughput and
# occupancy.
# FZ_GPU_PROFILE=full: the full section set with per-line source counters of
# the chunk kernels, kept as ncu.ncu-rep and exported as CSV (source-*.csv).
if [ "${FZ_GPU_PROFILE:-0}" != 0 ] && command -v ncu > /dev/null; then
  step kernel profile
  pin=(--gen smooth)
  for f in "$fields"/*.f32; do [ -f "$f" ] && { pin=("$f"); break; }; done
  # shellcheck disable=SC2206
  [ -n "${FZ_PROFILE_INPUT:-}" ] && pin=($FZ_PROFILE_INPUT)
  bench=("$build/tests/bench/fz_gpu_bench" -r 0 -e "${FZ_PROFILE_EB:-1e-3}"
         -p "${FZ_PROFILE_PRESETS:-fast,balanced}" "${pin[@]}")
  report=$logs/ncu.txt
  if [ "$FZ_GPU_PROFILE" = full ]; then
    report=$logs/ncu-details.txt
    ncu --clock-control none --kernel-name "regex:${FZ_PROFILE_KERNELS:-fzk_(enc|dec)32}" \
      --set full --import-source yes -f -o "$logs/ncu" "${bench[@]}" > "$logs/ncu-run.txt" 2>&1 ||
      { summary+=("ncu profile: FAILED"); status=1; }
    for view in details source-sass source-cuda; do
      case $view in
        details) opts=(--print-details all) ;;
        source-*) opts=(--page source --csv --print-source "${view#source-}") ;;
      esac
      ncu -i "$logs/ncu.ncu-rep" "${opts[@]}" > "$logs/ncu-$view.txt" 2>&1 ||
        { summary+=("ncu export $view: FAILED"); status=1; }
    done
    # The hottest CUDA source lines and SASS instructions of each kernel,
    # ranked by stall samples (small files: the exports can be too large to
    # bring back from a device machine).
    for view in cuda sass; do
      python3 tests/gpu/ncu_hot.py "$logs/ncu-source-$view.txt" 60 > "$logs/ncu-hot-$view.txt" ||
        { summary+=("ncu hot $view lines: FAILED"); status=1; }
    done
  else
    ncu --clock-control none --kernel-name regex:fzk_ \
      --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis \
      "${bench[@]}" > "$logs/ncu.txt" 2>&1 || { summary+=("ncu profile: FAILED"); status=1; }
  fi
  grep -E "^  fzk_|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued" \
    "$report" | grep -v "^ *---" | head -200
fi

# ---- the ratio kernels' phases -------------------------------------------
# FZ_GPU_PHASE_CLOCK=1: a second build with -DFZR_PHASE_CLOCK (its own
# directory; ratio_phase.cuh), whose ratio kernels sum each phase's clock
# cycles on thread 0 of every block, and one fz_gpu_bench run of the ratio
# preset on the first field and on $FZ_PHASE_INPUTS (more fields); each
# launch prints its phases' shares of the cycles ("phase clock").
if [ "${FZ_GPU_PHASE_CLOCK:-0}" != 0 ]; then
  step ratio kernels by phase
  clk=$build-clock
  side_build clock . "$clk" "$cuda_flags -DFZR_PHASE_CLOCK"
  pin=()
  for f in "$fields"/*.f32; do [ -f "$f" ] && { pin=("$f"); break; }; done
  # shellcheck disable=SC2206
  pin+=(${FZ_PHASE_INPUTS:-})
  for f in "${pin[@]}"; do
    "$clk/tests/bench/fz_gpu_bench" -r 1 -p ratio -e "${FZ_PHASE_EB:-1e-2,1e-3,1e-4}" "$f" \
      > "$logs/phase-clock.md" 2> "$logs/phase-clock.err" ||
      { summary+=("phase clock: FAILED"); status=1; }
    echo "$f"
    sed -n "/phase clock/p" "$logs/phase-clock.err"
  done
fi

# ---- service on the GPU ---------------------------------------------------
# FZ_GPU_RUN_SERVICE=1 (or "tests" / "bench" for one half): fzd on the GPU
# backend (tests/gpu/gpu_service.c), then tests/bench/fzctl_bench.sh with
# FZD_BACKEND=gpu ($FZ_SERVICE_BENCH_ARGS: NFILES MIB EB JOBS, default 100 64).
service=${FZ_GPU_RUN_SERVICE:-0}
if [ "$service" != 0 ]; then
  step service on the GPU
  cmake --build "$build" -j16 --target fzd fzctl test_gpu_service test_gpu_device_memory \
    test_gpu_client_device test_gpu_warm test_gpu_ratio \
    > "$logs/build-service.log" 2>&1 || { tail -40 "$logs/build-service.log"; exit 1; }
  if [ "$service" != bench ]; then
    run_ctest "ctest GPU service" ctest-service.log -R "$service_suites"
    grep -E "Test +#|PASS|FAIL|Assert|Synthesis|\[----\]" "$logs/ctest-service.log" | tail -30
  fi
  if [ "$service" != tests ]; then
    # shellcheck disable=SC2086
    if FZD_BACKEND=gpu sh tests/bench/fzctl_bench.sh "$build" ${FZ_SERVICE_BENCH_ARGS:-100 64} \
         > "$logs/fzctl-bench.txt" 2>&1; then
      summary+=("fzctl bench on the GPU: done")
    else
      summary+=("fzctl bench on the GPU: FAILED")
      status=1
    fi
    cat "$logs/fzctl-bench.txt"
  fi
fi

# ---- the JIT through fzd ------------------------------------------------------
# FZ_GPU_JIT_BENCH=1: tests/bench/jit_bench.sh on the GPU backend: the first
# job of a chain on a fresh daemon (compile), a warm job, and the first job
# on a restarted daemon with the module cache on disk ($FZ_JIT_BENCH_PIPELINE,
# default "quant | diff | rze"; $FZ_JIT_BENCH_ARGS: MIB JOBS, default 64 5).
if [ "${FZ_GPU_JIT_BENCH:-0}" != 0 ]; then
  step the JIT through fzd
  cmake --build "$build" -j16 --target fzd fzctl > "$logs/build-jit.log" 2>&1 ||
    { tail -40 "$logs/build-jit.log"; exit 1; }
  if FZD_BACKEND=gpu sh tests/bench/jit_bench.sh "$build" "${FZ_JIT_BENCH_PIPELINE:-quant | diff | rze}" \
       ${FZ_JIT_BENCH_ARGS:-64 5} > "$logs/jit-bench.txt" 2>&1; then
    summary+=("JIT bench through fzd: done")
  else
    summary+=("JIT bench through fzd: FAILED")
    status=1
  fi
  cat "$logs/jit-bench.txt"
fi

# ---- device buffers through fzd ------------------------------------------
# FZ_GPU_DEVICE_BENCH=1: fzd on the GPU backend with default settings and
# tests/bench/device_bench.c against it: CUDA IPC buffers of a client
# process through fzd against the same kernels in that process, same run
# ($FZ_DEVICE_BENCH_ARGS: extra options, e.g. "-r 9 -p balanced").
if [ "${FZ_GPU_DEVICE_BENCH:-0}" != 0 ]; then
  step device buffers through fzd
  cmake --build "$build" -j16 --target fzd fz_device_bench \
    > "$logs/build-device.log" 2>&1 || { tail -40 "$logs/build-device.log"; exit 1; }
  dev_inputs=()
  for f in "$fields"/*.f32; do [ -f "$f" ] && dev_inputs+=("$f"); done
  work=$(mktemp -d)
  "$build/daemon/fzd" --socket "$work/fzd.sock" --backend gpu 2> "$logs/fzd-device.log" &
  fzd_pid=$!
  for _ in $(seq 100); do [ -S "$work/fzd.sock" ] && break; sleep 0.1; done
  # shellcheck disable=SC2086
  if "$build/tests/bench/fz_device_bench" -S "unix:$work/fzd.sock" ${FZ_DEVICE_BENCH_ARGS:-} \
       "${dev_inputs[@]}" > "$logs/device-bench.md" 2> "$logs/device-bench.err"; then
    summary+=("device-buffer benchmark: archives identical, every bound held")
  else
    summary+=("device-buffer benchmark: FAILED (exit $?)")
    status=1
  fi
  kill -TERM "$fzd_pid"
  wait "$fzd_pid" || { summary+=("fzd (device benchmark) exited with $?"); status=1; }
  rm -rf "$work"
  cat "$logs/device-bench.md" "$logs/device-bench.err"
  tail -5 "$logs/fzd-device.log"
fi

step summary
printf '%s\n' "${summary[@]}"
exit $status
