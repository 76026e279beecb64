#!/bin/sh
# The test command: installs what is missing, builds everything (the CUDA code
# too when nvcc is found) with warnings as errors, and runs every test suite.
# GPU suites report as skipped on a machine without a GPU.
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
