# Writes a 2-D float32 dataset whose pipeline is a chain of stages spelled
# out in the filter parameters, reads it back and checks the bound; then
# shows a chain that fzd refuses failing the dataset's creation.  Run with
# HDF5_PLUGIN_PATH naming the folder of libh5z_fzd.so.
import struct
import sys

import h5py
import numpy as np

FZD = 62160  # the fzd filter id (docs/hdf5.md)
CHAIN = 3  # pipeline id: the chain text follows the fill value


def fzd_chain_opts(chain, mode=0, eb=0.0, fill=None):
    """cd_values for any chain text fzd takes: pipeline 3, mode (0 abs,
    1 rel, 2 pwrel), the bound and the fill value as two 32-bit words each,
    then the text's length in bytes and the text, 4 bytes a value,
    little-endian, zero-padded."""
    text = chain.encode()
    if not 1 <= len(text) <= 968:
        raise ValueError("a chain text of %d bytes: give 1 to 968" % len(text))
    lo, hi = struct.unpack("<II", struct.pack("<d", eb))
    flo, fhi = struct.unpack("<II", struct.pack("<d", 0.0 if fill is None else fill))
    padded = text + b"\0" * (-len(text) % 4)
    words = struct.unpack("<%dI" % (len(padded) // 4), padded)
    return (CHAIN, mode, lo, hi, 0 if fill is None else 1, flo, fhi, len(text)) + words


path = sys.argv[1] if len(sys.argv) > 1 else "example_chain.h5"
y, x = np.meshgrid(np.arange(200), np.arange(300), indexing="ij")
data = (np.sin(0.05 * x) * np.cos(0.03 * y) * 10).astype("f4")

with h5py.File(path, "w") as f:
    f.create_dataset("t", data=data, chunks=(64, 128), compression=FZD,
                     compression_opts=fzd_chain_opts("quant | diff | bitshuffle | rze(levels=2)",
                                                     mode=0, eb=1e-3))
    try:  # bitpack misspelled: refused when the dataset is created
        f.create_dataset("bad", data=data, chunks=(64, 128), compression=FZD,
                         compression_opts=fzd_chain_opts("quant | bitpak", eb=1e-3))
    except (OSError, ValueError) as e:
        print("refused:", e)
    else:
        sys.exit("a malformed chain made a dataset")
with h5py.File(path, "r") as f:
    back = f["t"][...]
    stored = f["t"].id.get_storage_size()

err = float(np.abs(back.astype("f8") - data.astype("f8")).max())
print("%d bytes stored for %d, max error %.3g" % (stored, data.nbytes, err))
assert err <= 1e-3 and stored < data.nbytes
