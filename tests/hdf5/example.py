# Writes a 3-D float32 dataset compressed by fzd with an absolute bound,
# reads it back and checks the bound.  fzd.h5 gives create_dataset its
# keywords and, imported, puts the plugin's folder on HDF5's search path
# when the package carries the plugin (else HDF5_PLUGIN_PATH names it).
import sys

import fzd.h5
import h5py
import numpy as np

path = sys.argv[1] if len(sys.argv) > 1 else "example.h5"
z, y, x = np.meshgrid(np.arange(40), np.arange(60), np.arange(70), indexing="ij")
data = (np.sin(0.1 * x) * np.cos(0.07 * y) + 0.01 * z).astype("f4")

with h5py.File(path, "w") as f:
    f.create_dataset("t", data=data, chunks=(16, 32, 32),
                     **fzd.h5.filter(pipeline="balanced", eb=1e-3, mode="abs"))
with h5py.File(path, "r") as f:
    back = f["t"][...]
    stored = f["t"].id.get_storage_size()
    print("filter:", f["t"].id.get_create_plist().get_filter(0)[:2])  # (62160, flags)

err = float(np.abs(back.astype("f8") - data.astype("f8")).max())
print("%d bytes stored for %d, max error %.3g" % (stored, data.nbytes, err))
assert err <= 1e-3 and stored < data.nbytes
