"""fzd as a numcodecs codec, so that zarr arrays compress through fzd.

    import zarr
    from fzd.numcodecs import FZD
    z = zarr.open("t.zarr", mode="w", shape=(1201, 2401), chunks=(600, 600),
                  dtype="f4", compressor=FZD(pipeline="balanced", eb=1e-3, mode="rel"))

The codec id is "fzd"; its config holds pipeline, eb, mode, fill_value and
address (None: $FZD_SOCKET or /run/fzd/fzd.sock).  numcodecs finds it
through the ``numcodecs.codecs`` entry point of the installed package, and
importing this module registers it too (numcodecs.register_codec), so a
zarr store written with it opens wherever fzd is installed.

encode() gets the chunk as an ndarray (zarr hands it one), so the archive
records its dtype and shape; a bytes-like chunk is compressed as u8.  Each
chunk is an archive of its own: fzd.info() reads its bound.  Both
directions need a reachable daemon (a clear fzd.Error otherwise); the
connection is opened at first use and kept, one per thread, process and
codec (zarr under dask threads is safe).
"""
import os
import threading

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray, ndarray_copy
from numcodecs.registry import register_codec

from ._client import Client


class FZD(Codec):
    """Error-bounded compression through fzd: ``pipeline`` (a preset or a
    chain), ``eb`` and ``mode`` (the bound; eb 0 leaves it to the chain),
    ``fill_value`` (kept exactly, outside rel's range), ``address`` (the
    daemon's; None: $FZD_SOCKET or the default socket)."""

    codec_id = "fzd"

    def __init__(self, pipeline="balanced", eb=0.0, mode="rel", fill_value=None, address=None):
        self.pipeline = pipeline
        self.eb = float(eb)
        self.mode = mode
        self.fill_value = None if fill_value is None else float(fill_value)
        self.address = address
        self._local = threading.local()

    def _connection(self):
        # A Client serves one thread, and does not survive fork
        # (multiprocessing, dask workers): each thread of each process opens
        # its own, at first use.
        loc = self._local
        if getattr(loc, "client", None) is None or loc.pid != os.getpid():
            loc.client = Client(self.address)
            loc.pid = os.getpid()
        return loc.client

    def _call(self, fn, *args, **kw):
        try:
            return fn(self._connection(), *args, **kw)
        except Exception as e:
            from ._errors import Error
            if isinstance(e, Error) and e.name in ("ECONNRESET", "EPROTO", "ETIMEDOUT"):
                self._local.client = None  # next time, a fresh connection
            raise

    def encode(self, buf):
        if isinstance(buf, np.ndarray) and buf.dtype.kind in "fiu":
            arr = buf
        else:
            arr = ensure_contiguous_ndarray(buf).view(np.uint8)
        return self._call(lambda c: c.compress(arr, pipeline=self.pipeline, eb=self.eb,
                                               mode=self.mode, fill_value=self.fill_value))

    def decode(self, buf, out=None):
        arc = ensure_contiguous_ndarray(buf)
        arr = self._call(lambda c: c.decompress(arc))
        if out is not None:
            return ndarray_copy(arr, out)
        return arr

    def get_config(self):
        return {"id": self.codec_id, "pipeline": self.pipeline, "eb": self.eb,
                "mode": self.mode, "fill_value": self.fill_value, "address": self.address}

    def __getstate__(self):
        return self.get_config()

    def __setstate__(self, state):
        state = dict(state)
        state.pop("id", None)
        self.__init__(**state)

    def __repr__(self):
        return "FZD(pipeline=%r, eb=%r, mode=%r, fill_value=%r, address=%r)" % (
            self.pipeline, self.eb, self.mode, self.fill_value, self.address)


register_codec(FZD)
