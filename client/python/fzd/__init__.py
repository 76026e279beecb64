"""fzd from Python: error-bounded compression through the fzd daemon.

    import numpy as np, fzd
    with fzd.Client() as c:                      # $FZD_SOCKET or /run/fzd/fzd.sock
        arc = c.compress(field, pipeline="balanced", eb=1e-3, mode="rel")
        back = c.decompress(arc)                 # same dtype and shape
    print(fzd.info(arc).eb_abs)                  # the header, no daemon needed

Pure Python (msgpack and numpy).  docs/python.md has the whole story:
memfds for large arrays, device arrays, the numcodecs codec for zarr
(fzd.numcodecs.FZD), errors (fzd.Error).
"""
from ._version import __version__
from ._errors import Error, ERRORS
from ._archive import info, crc32c, ArchiveInfo
from ._client import Client, DEFAULT_SOCKET, dtype_name

__all__ = ["Client", "Error", "ERRORS", "info", "crc32c", "ArchiveInfo", "DEFAULT_SOCKET",
           "dtype_name", "__version__"]
