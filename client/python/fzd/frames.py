"""Detector frames: HDF5 filter 32008 chunks (bitshuffle with LZ4 or zstd,
one chunk a frame) decoded into the pixels above a cut, or into dense
frames, with an optional mask and sparse matrix product (docs/frames.md).

Two paths give the same arrays:

* ``fzd.Client.frames(chunks, ...)`` and ``Client.frames_setup(...)``: the
  daemon's "frames" and "frames_setup" methods (docs/protocol.md);
* ``fzd.frames.decode(chunks, ...)``: the engine in this process (the
  library ``fzd._engine`` loads), no daemon needed.

``chunks`` is a list of bytes-like objects or an h5py dataset whose chunks
are whole frames (each chunk read raw with ``dataset.id.read_direct_chunk``,
in the chunk table's order).  Each frame gives a ``Frame``: ``count`` (the
pixels above the cut, before top_n), ``values`` and ``indices`` (numpy
arrays; dense: the frame in ``values``, shaped, and ``indices`` None),
``powder`` (the matrix product, float64 or int64, or None), ``status`` (0
or the frame's error code) and ``error`` (None or the fzd.Error of a frame
that failed: a corrupt chunk fails its own frame only).
"""
import collections
import ctypes

import numpy as np

from . import _engine
from ._archive import DTYPES
from ._errors import error

Frame = collections.namedtuple("Frame", "count values indices powder status error")

_CODECS = {"lz4": 2, "zstd": 3}
_CODES = {np.dtype(npd): code for code, (_, npd) in DTYPES.items()}
_NAMES = {np.dtype(npd): name for _, (name, npd) in DTYPES.items()}


BITSHUFFLE_FILTER = 32008


def is_dataset(obj):
    """Whether obj is an h5py dataset (by its interface; h5py is never
    imported here)."""
    return hasattr(obj, "id") and hasattr(obj, "chunks")


def codec_of(dataset):
    """The codec ("lz4" or "zstd") of an h5py dataset's chunks, read from
    its bitshuffle filter's parameters (cd_values[4]: 2 LZ4, 3 zstd; a
    filter with fewer parameters stores its blocks bit-shuffled but not
    compressed, which is not a frames chunk: EINVAL).
    The filter must be the dataset's only one: a chain with others around
    it stores chunks that are not bitshuffle chunks."""
    dcpl = dataset.id.get_create_plist()
    filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    if len(filters) != 1 or filters[0][0] != BITSHUFFLE_FILTER:
        raise error("EINVAL", "a frames dataset has the bitshuffle filter (%d) alone, not the "
                    "filters %s" % (BITSHUFFLE_FILTER, [f[0] for f in filters]))
    values = filters[0][2]
    if len(values) < 5 or values[4] == 0:
        raise error("EINVAL", "the bitshuffle filter of this dataset does not compress "
                    "(no LZ4 or zstd in its cd_values %s): read it with h5py" % (list(values),))
    code = values[4]
    for name, c in _CODECS.items():
        if c == code:
            return name
    raise error("EINVAL", "the bitshuffle filter's codec %d is neither LZ4 (2) nor zstd (3)"
                % code)


def resolve_codec(chunks, codec):
    """codec as given, or, for None, the codec of an h5py dataset's filter
    (LZ4, the bitshuffle filter's default, for raw chunks)."""
    if codec is None:
        return codec_of(chunks) if is_dataset(chunks) else "lz4"
    if codec not in _CODECS:
        raise error("EPARAMS", "codec must be lz4 or zstd, not %r" % (codec,))
    return codec


def chunks_of(dataset):
    """The raw chunks of an h5py dataset chunked one frame a chunk, as a
    list of bytes, and the frame shape: ([bytes, ...], (ni, nj))."""
    shape, chunk = dataset.shape, dataset.chunks
    if chunk is None or len(shape) != 3 or chunk[0] != 1 or tuple(chunk[1:]) != tuple(shape[1:]):
        raise error("ESHAPE", "a frames dataset is (frames, ni, nj) chunked (1, ni, nj), not "
                    "%r chunked %r" % (shape, chunk))
    out = []
    for i in range(shape[0]):
        mask, data = dataset.id.read_direct_chunk((i, 0, 0))
        if mask != 0:
            raise error("EINVAL", "frame %d: a filter of the chain was skipped (mask %d)"
                        % (i, mask))
        out.append(bytes(data))
    return out, tuple(shape[1:])


def chunk_table(dataset):
    """[(byte offset, length), ...] of an h5py dataset's frames in its file
    (chunked one frame a chunk, every chunk written, no filter skipped)."""
    shape, chunk = dataset.shape, dataset.chunks
    if chunk is None or len(shape) != 3 or chunk[0] != 1 or tuple(chunk[1:]) != tuple(shape[1:]):
        raise error("ESHAPE", "a frames dataset is (frames, ni, nj) chunked (1, ni, nj), not "
                    "%r chunked %r" % (shape, chunk))
    out = []
    for i in range(shape[0]):
        info = dataset.id.get_chunk_info_by_coord((i, 0, 0))
        if info.byte_offset is None or info.filter_mask != 0:
            raise error("EINVAL", "frame %d: its chunk is not written, or a filter of the chain "
                        "was skipped" % i)
        out.append((int(info.byte_offset), int(info.size)))
    return out


def normalize(chunks, shape, dtype):
    """(list of chunk bytes, frame shape tuple, numpy dtype) from what the
    callers accept: a list of chunks with shape and dtype, or an h5py
    dataset (its own shape and dtype)."""
    if is_dataset(chunks):
        dt = np.dtype(dtype) if dtype is not None else chunks.dtype
        chunks, shape = chunks_of(chunks)
    else:
        if shape is None or dtype is None:
            raise error("EPARAMS", "frames of raw chunks need shape and dtype")
        dt = np.dtype(dtype)
        chunks = [bytes(c) for c in chunks]
    shape = tuple(int(x) for x in (shape if np.ndim(shape) else (shape,)))
    if dt.newbyteorder("<") not in _CODES:
        raise error("EDTYPE", "numpy dtype %s has no fzd dtype" % (dt,))
    return chunks, shape, dt.newbyteorder("<")


def csr_arrays(csr, npixels):
    """(indptr u64, indices u32, weights f32 or i32) of a CSR matrix: a
    scipy.sparse matrix of npixels columns or an (indptr, indices, weights)
    tuple."""
    if hasattr(csr, "indptr"):
        if csr.shape[1] != npixels:
            raise error("ESHAPE", "the matrix has %d columns, the frame %d pixels"
                        % (csr.shape[1], npixels))
        indptr, indices, weights = csr.indptr, csr.indices, csr.data
    else:
        indptr, indices, weights = csr
    weights = np.asarray(weights)
    wt = np.int32 if weights.dtype.kind in "iu" else np.float32
    return (np.ascontiguousarray(indptr, dtype=np.uint64),
            np.ascontiguousarray(indices, dtype=np.uint32),
            np.ascontiguousarray(weights, dtype=wt))


def _lib():
    lib = _engine.library()
    if not hasattr(lib, "fzflat_frames_create"):
        raise error("ENOSYS", "this fzd engine library was built without the frames codec "
                    "(liblz4, libzstd)")
    c = ctypes
    if not getattr(lib, "_fzd_frames_bound", False):
        lib.fzflat_frames_create.restype = c.c_int
        lib.fzflat_frames_create.argtypes = [
            c.c_int, c.c_size_t, c.c_int, c.c_void_p, c.c_size_t, c.c_void_p, c.c_void_p,
            c.c_void_p, c.c_void_p, c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]
        lib.fzflat_frames_sparse.restype = c.c_int64
        lib.fzflat_frames_sparse.argtypes = [
            c.c_void_p, c.c_char_p, c.c_size_t, c.c_double, c.c_size_t, c.c_void_p, c.c_void_p,
            c.c_size_t, c.POINTER(c.c_size_t), c.c_void_p, c.c_void_p, c.c_char_p, c.c_size_t]
        lib.fz_frames_dense.restype = c.c_int
        lib.fz_frames_dense.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t, c.c_void_p,
                                        c.c_size_t, c.c_void_p, c.c_void_p, c.c_char_p,
                                        c.c_size_t]
        lib.fz_frames_destroy.restype = None
        lib.fz_frames_destroy.argtypes = [c.c_void_p]
        lib._fzd_frames_bound = True
    return lib


def _ptr(a):
    return None if a is None else a.ctypes.data


def _frame_error(lib, rc, why):
    name = lib.fz_err_name(rc).decode()
    e = error(name, why.decode(errors="replace") or lib.fz_strerror(rc).decode())
    return Frame(0, None, None, None, rc, e)


def decode(chunks, shape=None, dtype=None, codec=None, cut=0.0, top_n=0, dense=False,
           mask=None, csr=None):
    """The frames of chunks decoded by the engine in this process: a list
    of Frame, one a chunk, as Client.frames gives them.  codec None: the
    dataset's own (its filter's parameters), LZ4 for raw chunks."""
    codec = resolve_codec(chunks, codec)
    chunks, shape, dt = normalize(chunks, shape, dtype)
    npix = int(np.prod(shape))
    lib = _lib()
    m = None if mask is None else np.ascontiguousarray(mask, dtype=np.uint8).reshape(-1)
    if m is not None and m.size != npix:
        raise error("ESIZE", "the mask has %d bytes, the frame %d pixels" % (m.size, npix))
    rows, indptr, indices, weights = 0, None, None, None
    if csr is not None:
        indptr, indices, weights = csr_arrays(csr, npix)
        rows = indptr.size - 1
        if rows < 1 or indices.size != int(indptr[-1]) or weights.size != indices.size:
            raise error("ESIZE", "the matrix's indptr, indices and weights disagree")
    wint = weights is not None and weights.dtype == np.int32
    why = ctypes.create_string_buffer(256)
    f = ctypes.c_void_p()
    rc = lib.fzflat_frames_create(_CODES[dt], npix, _CODECS[codec], _ptr(m), rows,
                                  _ptr(indptr), _ptr(indices),
                                  None if wint else _ptr(weights), _ptr(weights) if wint else None,
                                  ctypes.byref(f), why, len(why))
    if rc < 0:
        raise error(lib.fz_err_name(rc).decode(), why.value.decode(errors="replace"))
    out = []
    try:
        cap = min(top_n, npix) if top_n else npix
        for ch in chunks:
            powder = np.zeros(rows, dtype=np.int64 if wint else np.float64) if rows else None
            pf = None if powder is None or wint else _ptr(powder)
            pi = _ptr(powder) if wint else None
            why.value = b""
            if dense:
                frame = np.empty(npix, dtype=dt)
                rc = lib.fz_frames_dense(f, ch, len(ch), _ptr(frame), frame.nbytes, pf, pi, why,
                                         len(why))
                out.append(_frame_error(lib, rc, why.value) if rc < 0 else
                           Frame(npix, frame.reshape(shape), None, powder, 0, None))
                continue
            vals = np.empty(cap, dtype=dt)
            idx = np.empty(cap, dtype=np.uint32)
            listed = ctypes.c_size_t()
            n = lib.fzflat_frames_sparse(f, ch, len(ch), float(cut), int(top_n), _ptr(vals),
                                         _ptr(idx), cap, ctypes.byref(listed), pf, pi, why,
                                         len(why))
            if n < 0:
                out.append(_frame_error(lib, int(n), why.value))
            else:
                k = listed.value
                out.append(Frame(int(n), vals[:k].copy(), idx[:k].copy(), powder, 0, None))
    finally:
        lib.fz_frames_destroy(f)
    return out


def encode(frame, codec="lz4", level=3):
    """One frame as the HDF5 filter 32008 writes it (the bitshuffle
    package's format, default block size): bytes, by the engine in this
    process."""
    a = np.ascontiguousarray(frame)
    if a.dtype.newbyteorder("<") not in _CODES or a.size == 0:
        raise error("EDTYPE", "cannot encode a frame of %s" % (a.dtype,))
    if codec not in _CODECS:
        raise error("EPARAMS", "codec must be lz4 or zstd, not %r" % (codec,))
    lib = _lib()
    fn = lib.fz_bslz4_encode
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                   ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                   ctypes.c_char_p, ctypes.c_size_t]
    lib.fz_bslz4_bound.restype = ctypes.c_size_t
    lib.fz_bslz4_bound.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t,
                                   ctypes.c_size_t]
    cap = lib.fz_bslz4_bound(_CODECS[codec], a.size, a.itemsize, 0)
    out = ctypes.create_string_buffer(cap)
    why = ctypes.create_string_buffer(256)
    n = fn(_CODECS[codec], a.ctypes.data, a.size, a.itemsize, 0, level, out, cap, why, len(why))
    if n < 0:
        raise error(lib.fz_err_name(n).decode(), why.value.decode(errors="replace"))
    return out.raw[:n]


def from_reply(result, shape, dt, dense, powder_dtype=np.float64, buf=None):
    """The Frames of a "frames" reply (powder_dtype: int64 for a setup with
    integer weights).  buf: the output's bytes from out_offset when the
    results went to an output (each frame's arrays at values_at,
    indices_at and powder_at, docs/protocol.md), else None (in the reply)."""
    rows = result.get("rows", 0)

    def part(fr, name, dtype, count):
        if buf is None:
            return np.frombuffer(fr[name], dtype=dtype).copy()
        return np.frombuffer(buf, dtype=dtype, count=count, offset=fr[name + "_at"]).copy()

    out = []
    for fr in result["frames"]:
        if fr.get("status", 0) != 0:
            e = fr.get("error") or {}
            out.append(Frame(0, None, None, None, fr["status"],
                             error(e.get("name", "EIO"), e.get("message", ""))))
            continue
        n = fr.get("listed", 0)
        vals = part(fr, "values", dt, n)
        powder = None
        if ("powder" if buf is None else "powder_at") in fr:
            powder = part(fr, "powder", powder_dtype, rows)
        if dense:
            out.append(Frame(fr["count"], vals.reshape(shape), None, powder, 0, None))
        else:
            out.append(Frame(fr["count"], vals, part(fr, "indices", "<u4", n), powder, 0, None))
    return out
