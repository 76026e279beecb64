# Writes a 3-D float32 dataset compressed by fzd with an absolute bound,
# reads it back and checks the bound.  Run with HDF5_PLUGIN_PATH naming the
# folder of libh5z_fzd.so.
import struct
import sys

import h5py
import numpy as np

FZD = 62160  # the fzd filter id (docs/hdf5.md)


def fzd_opts(pipeline=0, mode=0, eb=1e-3):
    """cd_values: pipeline (0 balanced, 1 fast, 2 lossless, 4 ratio), mode (0 abs,
    1 rel, 2 pwrel), the bound as two 32-bit words."""
    lo, hi = struct.unpack("<II", struct.pack("<d", eb))
    return (pipeline, mode, lo, hi)


path = sys.argv[1] if len(sys.argv) > 1 else "example.h5"
z, y, x = np.meshgrid(np.arange(40), np.arange(60), np.arange(70), indexing="ij")
data = (np.sin(0.1 * x) * np.cos(0.07 * y) + 0.01 * z).astype("f4")

with h5py.File(path, "w") as f:
    f.create_dataset("t", data=data, chunks=(16, 32, 32), compression=FZD,
                     compression_opts=fzd_opts(mode=0, eb=1e-3))
with h5py.File(path, "r") as f:
    back = f["t"][...]
    stored = f["t"].id.get_storage_size()

err = float(np.abs(back.astype("f8") - data.astype("f8")).max())
print("%d bytes stored for %d, max error %.3g" % (stored, data.nbytes, err))
assert err <= 1e-3 and stored < data.nbytes
