"""fzd as a zarr 3 codec: each chunk of an array is one fzd archive.

    import zarr
    from fzd.zarr3 import FZDCodec
    z = zarr.create_array("t.zarr", shape=(1201, 2401), chunks=(600, 600),
                          dtype="f4", serializer=FZDCodec(eb=0.05, mode="abs"))

It is an array-to-bytes codec (zarr's ``serializer``: it takes the place of
the "bytes" codec), because an archive records the chunk's dtype and shape;
bytes-to-bytes codecs may follow it but gain nothing.  Its name in the
array's zarr.json is "fzd", with the configuration ``pipeline``, ``eb``,
``mode`` and, when set, ``fill_value``.  zarr finds it through the
``zarr.codecs`` entry point of the installed package; importing this
module registers it too (zarr.registry.register_codec).

Decoding runs the engine in this process, so a store reads with no daemon;
encoding goes through a daemon when one answers (``address``, not stored:
None is fzd.default_address()) and runs the engine here otherwise.  Where
no fill_value is configured, a lossy chunk passes the array's fill value
(when finite): zarr pads edge chunks with it, and fzd keeps those cells
exactly and leaves them out of REL's value range.  A decoded chunk is
checked against the chunk's dtype and shape before anything is decoded.
"""
import asyncio
import math
from dataclasses import dataclass

import numpy as np
from zarr.abc.codec import ArrayBytesCodec
from zarr.core.common import parse_named_configuration
from zarr.registry import register_codec

from . import _api, _engine
from .numcodecs import chunk_job

_MODES = ("abs", "rel", "pwrel")


@dataclass(frozen=True)
class FZDCodec(ArrayBytesCodec):
    """Error-bounded compression of zarr 3 chunks with fzd: ``pipeline``
    (a preset or a chain; None: "balanced" for float chunks, "lossless" for
    others), ``eb`` and ``mode`` (the bound, per chunk: docs/python.md),
    ``fill_value`` (None: the array's), ``address`` (a daemon's, for
    encoding; not stored in the array's metadata)."""

    is_fixed_size = False

    pipeline: object = None
    eb: float = 1e-4
    mode: str = "rel"
    fill_value: object = None
    address: object = None

    def __init__(self, *, pipeline=None, eb=1e-4, mode="rel", fill_value=None, address=None):
        if pipeline is not None and not isinstance(pipeline, str):
            raise TypeError("fzd: pipeline must be a string or None, not %r" % (pipeline,))
        if mode not in _MODES:
            raise ValueError("fzd: mode must be one of %s, not %r" % (", ".join(_MODES), mode))
        object.__setattr__(self, "pipeline", pipeline)
        object.__setattr__(self, "eb", float(eb))
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "fill_value", None if fill_value is None else float(fill_value))
        object.__setattr__(self, "address", address)

    @classmethod
    def from_dict(cls, data):
        _, config = parse_named_configuration(data, "fzd", require_configuration=False)
        return cls(**(config or {}))

    def to_dict(self):
        config = {"eb": self.eb, "mode": self.mode}
        if self.pipeline is not None:
            config["pipeline"] = self.pipeline
        if self.fill_value is not None:
            config["fill_value"] = self.fill_value
        return {"name": "fzd", "configuration": config}

    def validate(self, *, shape, dtype, chunk_grid):
        dt = np.dtype(dtype.to_native_dtype())
        if dt.kind not in "fiu" or dt.itemsize > 8 or (dt.kind == "f" and dt.itemsize < 4):
            raise ValueError("fzd: dtype %s is not supported (u8..u64, i8..i64, f32, f64)" % dt)

    def compute_encoded_size(self, input_byte_length, chunk_spec):
        raise NotImplementedError

    def _job(self, a, chunk_spec):
        pipeline, eb, mode, fill = chunk_job(a, self.pipeline, self.eb, self.mode,
                                             self.fill_value)
        if fill is None and a.dtype.kind == "f" and pipeline != "lossless":
            f = chunk_spec.fill_value
            if f is not None and math.isfinite(float(f)):
                fill = float(f)
        return pipeline, eb, mode, fill

    def _encode_sync(self, chunk_array, chunk_spec):
        a = chunk_array.as_numpy_array()
        pipeline, eb, mode, fill = self._job(a, chunk_spec)
        arc = _api.compress(a, pipeline=pipeline, eb=eb, mode=mode, fill_value=fill,
                            address=self.address)
        return chunk_spec.prototype.buffer.from_bytes(arc)

    def _decode_sync(self, chunk_bytes, chunk_spec):
        out = np.empty(chunk_spec.shape, chunk_spec.dtype.to_native_dtype())
        local = True if _engine.available() else None
        _api.decompress(chunk_bytes.as_numpy_array(), out=out, local=local,
                        address=self.address)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(out)

    # The engine releases the GIL, so chunks run side by side in threads.
    async def _encode_single(self, chunk_array, chunk_spec):
        return await asyncio.to_thread(self._encode_sync, chunk_array, chunk_spec)

    async def _decode_single(self, chunk_bytes, chunk_spec):
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)


register_codec("fzd", FZDCodec)
