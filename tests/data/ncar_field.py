#!/usr/bin/python3
"""Writes a real scientific field as a raw little-endian float32 file.

The field is the Trinidad topography grid from NCAR Graphics' example data
(Debian package libncarg-data), read with netCDF4 (python3-netcdf4).  The
file is named NAME_D0xD1.f32, slowest dimension first, which is what the
demo and the benchmarks expect.

usage: ncar_field.py OUTDIR [DATADIR]
"""
import os
import sys

import netCDF4
import numpy as np


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    data = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/ncarg/data"
    var = netCDF4.Dataset(os.path.join(data, "cdf", "trinidad.nc"))["data"]
    var.set_auto_mask(False)
    a = np.squeeze(np.asarray(var[:], dtype="<f4"))
    name = os.path.join(out, "trinidad_%s.f32" % "x".join(map(str, a.shape)))
    a.tofile(name)
    print(name)


if __name__ == "__main__":
    main()
