#!/bin/sh
# Installs the Debian 12 packages that fzd builds and tests with, and any
# extra packages named as arguments, when they are missing (systemd, man-db
# and groff-base bring systemd-analyze, man and groff, which check the units
# and the man pages).  CUDA is not a Debian package: it is used when /usr/local/cuda
# has it.
set -eu
pkgs="build-essential cmake ninja-build pkg-config libuv1-dev libmsgpack-dev
      libcjson-dev libcriterion-dev python3 python3-msgpack python3-numpy
      python3-zarr python3-numcodecs python3-entrypoints python3-pip python3-setuptools
      systemd man-db groff-base gfortran libopenmpi-dev openmpi-bin
      libhdf5-openmpi-dev python3-h5py-mpi python3-mpi4py
      libhdf5-dev hdf5-tools python3-h5py python3-tables python3-netcdf4
      python3-venv python3-dev liblz4-dev libzstd-dev clang-format $*"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
if [ -n "$missing" ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends $missing
fi
