"""fzd as a numcodecs codec, so that zarr 2 arrays compress through fzd.

    import zarr
    from fzd.numcodecs import FZD
    z = zarr.open("t.zarr", mode="w", shape=(1201, 2401), chunks=(600, 600),
                  dtype="f4", compressor=FZD(eb=0.05, mode="abs"))

The codec id is "fzd"; its config holds pipeline, eb, mode, fill_value and
address (None: fzd.default_address()).  numcodecs finds it through the
``numcodecs.codecs`` entry point of the installed package, and importing
this module registers it too (numcodecs.register_codec), so a zarr store
written with it opens wherever fzd is installed.  Zarr 3 stores use
fzd.zarr3.FZDCodec instead.

Decoding runs the engine in this process (no daemon is needed to read);
encoding goes through a daemon when one answers at ``address`` and runs
the engine here otherwise: the archive is the same.  encode() gets the
chunk as an ndarray (zarr hands it one), so the archive records its dtype
and shape; a bytes-like chunk is stored losslessly as u8.  Each chunk is an
archive of its own: fzd.info() reads its bound.
"""
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray
from numcodecs.registry import register_codec

from . import _api, _engine


def chunk_job(arr, pipeline, eb, mode, fill_value):
    """(pipeline, eb, mode, fill_value) for one chunk: pipeline None is
    "balanced" with the bound for floating-point chunks and "lossless" for
    integer and byte chunks (which the quantizer does not take)."""
    if pipeline is None:
        if arr.dtype.kind != "f":
            return "lossless", 0.0, mode, None
        pipeline = "balanced"
    return pipeline, eb, mode, fill_value


class FZD(Codec):
    """Error-bounded compression with fzd: ``pipeline`` (a preset or a
    chain; None: "balanced" for float chunks, "lossless" for others),
    ``eb`` and ``mode`` (the bound; REL is relative to each chunk's own
    value range: docs/python.md), ``fill_value`` (kept exactly and left out
    of REL's range: give the array's fill value), ``address`` (a daemon's;
    None: fzd.default_address())."""

    codec_id = "fzd"

    def __init__(self, pipeline=None, eb=1e-4, mode="rel", fill_value=None, address=None):
        self.pipeline = pipeline
        self.eb = float(eb)
        self.mode = mode
        self.fill_value = None if fill_value is None else float(fill_value)
        self.address = address

    def encode(self, buf):
        if isinstance(buf, np.ndarray) and buf.dtype.kind in "fiu":
            arr = buf
        else:
            arr = ensure_contiguous_ndarray(buf).view(np.uint8)
        pipeline, eb, mode, fill = chunk_job(arr, self.pipeline, self.eb, self.mode,
                                             self.fill_value)
        return _api.compress(arr, pipeline=pipeline, eb=eb, mode=mode, fill_value=fill,
                             address=self.address)

    def decode(self, buf, out=None):
        arc = ensure_contiguous_ndarray(buf)
        # The engine here reads every chunk; a daemon only where this
        # process has no engine library.
        local = True if _engine.available() else None
        return _api.decompress(arc, out=out, local=local, address=self.address)

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
