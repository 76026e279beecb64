"""fzd from Python: error-bounded compression of numpy arrays.

    import numpy as np, fzd
    arc = fzd.compress(field, pipeline="balanced", eb=1e-3, mode="rel")
    back = fzd.decompress(arc)                   # same dtype and shape
    print(fzd.info(arc).eb_abs)                  # the header

fzd.compress and fzd.decompress use a running fzd when one answers (the
fast path: a GPU, warm plans) and the fzd engine inside this process
otherwise, with the same archive byte for byte, so reading never needs a
daemon.  fzd.Client is the daemon's client (memfds for large arrays,
device arrays, many jobs in flight); fzd.numcodecs.FZD is a numcodecs codec
for zarr 2 and fzd.zarr.FZDCodec a zarr 3 codec.  docs/python.md has the
whole story; errors are fzd.Error.  fzd.frames decodes detector chunks
(HDF5 filter 32008) in process; fzd.Client.frames does it on a daemon.
"""
from ._version import __version__
from ._errors import Error, ERRORS
from ._archive import info, crc32c, ArchiveInfo
from ._client import Client, DEFAULT_SOCKET, default_address, dtype_name
from ._api import compress, decompress, engine_available
from . import frames

__all__ = ["compress", "decompress", "engine_available", "Client", "Error", "ERRORS", "info",
           "crc32c", "ArchiveInfo", "DEFAULT_SOCKET", "default_address", "dtype_name",
           "__version__", "frames"]
