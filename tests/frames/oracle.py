#!/usr/bin/env python3
"""fzd's detector-frame codec against the packages that define the format.

Usage: oracle.py --lib libfzframes_testlib.so --venv DIR

Makes (once, then reuses) a virtual environment in DIR with bitshuffle,
hdf5plugin, h5py, numpy and bslz4-to-sparse from PyPI, re-runs itself in it,
and checks through ctypes:
  * chunks written by the bitshuffle package (and by hdf5plugin's Bitshuffle
    filter through h5py, read back with read_direct_chunk) decode in fzd to
    the original pixels, for every element size, odd sizes, partial blocks,
    several block sizes, LZ4 and zstd;
  * fzd's LZ4 chunks are byte-identical to the package's, and fzd's chunks
    of both codecs decode in the package and through h5py + hdf5plugin;
  * fzd's sparse lists equal numpy's reference (the package's dense decode,
    then the cut and the mask) on every frame, and equal bslz4-to-sparse's
    chunk2sparse for u16 frames; top-N and the matrix products equal plain
    references.
Any mismatch exits non-zero.
"""
import argparse
import ctypes
import os
import struct
import subprocess
import sys
import tempfile

PACKAGES = ["numpy", "bitshuffle", "hdf5plugin", "h5py", "bslz4-to-sparse"]
LZ4, ZSTD = 2, 3
DTYPES = {"u1": 1, "i1": 2, "u2": 3, "i2": 4, "u4": 5, "i4": 6, "u8": 7, "i8": 8,
          "f4": 9, "f8": 10}


def ensure_venv(venv):
    """Runs this script in the venv, creating it first when needed."""
    py = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    marker = os.path.join(venv, "fz-packages.txt")
    want = " ".join(PACKAGES)
    if not (os.path.exists(marker) and open(marker).read() == want):
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        subprocess.check_call([py, "-m", "pip", "install", "-q", *PACKAGES])
        with open(marker, "w") as f:
            f.write(want)
    os.execv(py, [py, *sys.argv])


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Fz:
    def __init__(self, path):
        L = ctypes.CDLL(path)
        P, S, I64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64
        L.fzt_decode.restype = I64
        L.fzt_decode.argtypes = [ctypes.c_int, P, S, S, P, S, ctypes.c_char_p, S]
        L.fzt_encode.restype = I64
        L.fzt_encode.argtypes = [ctypes.c_int, P, S, S, S, ctypes.c_int, P, S]
        L.fzt_bound.restype = S
        L.fzt_bound.argtypes = [ctypes.c_int, S, S, S]
        L.fzt_sparse.restype = I64
        L.fzt_sparse.argtypes = [ctypes.c_int, S, ctypes.c_int, P, P, S, ctypes.c_double, S,
                                 P, P, S, S, P, P, P, P, P, P, ctypes.c_char_p, S]
        self.L = L

    def decode(self, codec, chunk, dtype, n):
        out = np.empty(n, dtype)
        why = ctypes.create_string_buffer(256)
        buf = np.frombuffer(chunk, np.uint8)
        rc = self.L.fzt_decode(codec, buf.ctypes.data, len(chunk), out.itemsize,
                               out.ctypes.data, out.nbytes, why, 256)
        check(rc == out.nbytes, "fzd decode: %d %s" % (rc, why.value))
        return out

    def encode(self, codec, arr, block=0, level=3):
        arr = np.ascontiguousarray(arr)
        cap = self.L.fzt_bound(codec, arr.size, arr.itemsize, block)
        out = np.empty(cap, np.uint8)
        rc = self.L.fzt_encode(codec, arr.ctypes.data, arr.size, arr.itemsize, block, level,
                               out.ctypes.data, cap)
        check(rc > 0, "fzd encode: %d" % rc)
        return out[:rc].tobytes()

    def sparse(self, codec, chunk, dtype, n, cut, mask=None, top_n=0, csr=None):
        vals = np.empty(max(n, 1), dtype)
        idx = np.empty(max(n, 1), np.uint32)
        why = ctypes.create_string_buffer(256)
        buf = np.frombuffer(chunk, np.uint8)
        m = None if mask is None else np.ascontiguousarray(mask, np.uint8)
        nrows, ptrs, pf, pi = 0, [None] * 4, None, None
        if csr is not None:
            indptr, cols, wf, wi = csr
            nrows = len(indptr) - 1
            ptrs = [indptr.ctypes.data, cols.ctypes.data,
                    None if wf is None else wf.ctypes.data,
                    None if wi is None else wi.ctypes.data]
            pf = np.zeros(nrows, np.float64) if wf is not None else None
            pi = np.zeros(nrows, np.int64) if wi is not None else None
        rc = self.L.fzt_sparse(DTYPES[np.dtype(dtype).str[1:]], n, codec,
                               None if m is None else m.ctypes.data, buf.ctypes.data,
                               len(chunk), cut, top_n, vals.ctypes.data, idx.ctypes.data, n,
                               nrows, *ptrs, None if pf is None else pf.ctypes.data,
                               None if pi is None else pi.ctypes.data, why, 256)
        check(rc >= 0, "fzd sparse: %d %s" % (rc, why.value))
        return vals[:rc], idx[:rc], (pf if pf is not None else pi)


def pkg_chunk(codec, arr, block):
    """A chunk as the HDF5 filter writes it: its 12-byte header, then the
    package's blocks."""
    body = (bitshuffle.compress_lz4(arr, block) if codec == LZ4
            else bitshuffle.compress_zstd(arr, block, 3)).tobytes()
    b = block or {1: 8192, 2: 4096, 4: 2048, 8: 1024}[arr.itemsize]
    return struct.pack(">QI", arr.nbytes, b * arr.itemsize) + body


def pkg_decode(codec, chunk, dtype, n):
    nbytes, bbytes = struct.unpack(">QI", chunk[:12])
    body = np.frombuffer(chunk[12:], np.uint8)
    fn = bitshuffle.decompress_lz4 if codec == LZ4 else bitshuffle.decompress_zstd
    return fn(body, (n,), np.dtype(dtype), bbytes // np.dtype(dtype).itemsize)


def frame(rng, dtype, n):
    """Detector-like pixels: small counts with a few large ones; floats
    with the special values."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a = (rng.integers(-20, 21, n) * 0.75).astype(dt)
        sp = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 10.0], dt)
        hit = rng.random(n) < 0.02
        a[hit] = sp[rng.integers(0, len(sp), hit.sum())]
        return a
    info = np.iinfo(dt)
    a = rng.poisson(2.0, n).astype(dt)
    if dt.kind == "i":
        a = (a.astype(np.int64) - 2).astype(dt)
    hit = rng.random(n) < 0.03
    a[hit] = rng.integers(info.min, info.max, hit.sum(), dtype=dt, endpoint=True)
    return a


def reference_sparse(dense, cut, mask):
    with np.errstate(invalid="ignore"):
        keep = dense > cut
    if mask is not None:
        keep &= mask != 0
    idx = np.flatnonzero(keep).astype(np.uint32)
    return dense[idx], idx


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def codec_and_sparse(fz, rng):
    sizes = [0, 1, 7, 8, 13, 1000, 4103, 10003, 65536 + 77]
    blocks = [0, 8, 1000, 4096]
    cases = zstd_same = 0
    for dstr in DTYPES:
        dt = np.dtype(dstr)
        for n in sizes:
            arr = frame(rng, dt, n)
            mask = (rng.random(n) < 0.9).astype(np.uint8)
            for block in blocks:
                for codec in (LZ4, ZSTD):
                    what = "%s n=%d block=%d codec=%d" % (dstr, n, block, codec)
                    pc = pkg_chunk(codec, arr, block)
                    check(same(fz.decode(codec, pc, dt, n), arr), "fzd decode of the package: " + what)
                    mine = fz.encode(codec, arr, block)
                    if codec == LZ4:
                        check(mine == pc, "LZ4 chunk not byte-identical: " + what)
                    else:
                        zstd_same += mine == pc
                    check(same(pkg_decode(codec, mine, dt, n), arr), "package decode of fzd: " + what)
                    dense = pkg_decode(codec, pc, dt, n)
                    for cut in (-1.5, 0, 3, 10.25, 1e6):
                        for m in (None, mask):
                            v, i, _ = fz.sparse(codec, pc, dt, n, cut, m)
                            rv, ri = reference_sparse(dense, cut, m)
                            check(same(i, ri) and same(v, rv), "sparse list: %s cut=%g" % (what, cut))
                    cases += 1
    print("codec: %d cases, every element size; LZ4 byte-identical; zstd byte-identical in %d of %d"
          % (cases, zstd_same, cases // 2))


def hdf5plugin_chunks(fz, rng, tmp):
    """Chunks through h5py with hdf5plugin's Bitshuffle filter, both ways."""
    path = os.path.join(tmp, "frames.h5")
    shapes = [(4, 37, 41), (3, 216, 206)]
    n_checked = 0
    for dstr in ("u1", "u2", "i2", "u4", "i4", "f4", "u8", "f8"):
        dt = np.dtype(dstr)
        for shape in shapes:
            data = frame(rng, dt, int(np.prod(shape))).reshape(shape)
            npx = shape[1] * shape[2]
            for cname, codec in (("lz4", LZ4), ("zstd", ZSTD)):
                with h5py.File(path, "w") as f:
                    f.create_dataset("pkg", data=data, chunks=(1,) + shape[1:],
                                     **hdf5plugin.Bitshuffle(nelems=0, cname=cname))
                    mine = f.create_dataset("fzd", shape=shape, dtype=dt, chunks=(1,) + shape[1:],
                                            **hdf5plugin.Bitshuffle(nelems=0, cname=cname))
                    for k in range(shape[0]):
                        mine.id.write_direct_chunk((k, 0, 0), fz.encode(codec, data[k].ravel()))
                with h5py.File(path, "r") as f:
                    for k in range(shape[0]):
                        _, chunk = f["pkg"].id.read_direct_chunk((k, 0, 0))
                        check(same(fz.decode(codec, chunk, dt, npx), data[k].ravel()),
                              "fzd decode of an hdf5plugin chunk: %s %s %s" % (dstr, shape, cname))
                        if codec == LZ4:
                            check(chunk == fz.encode(codec, data[k].ravel()),
                                  "hdf5plugin LZ4 chunk differs from fzd's: %s %s" % (dstr, shape))
                        v, i, _ = fz.sparse(codec, chunk, dt, npx, 2.0)
                        rv, ri = reference_sparse(data[k].ravel(), 2.0, None)
                        check(same(i, ri) and same(v, rv), "sparse of an hdf5plugin chunk")
                    check(same(f["fzd"][()], data), "h5py + hdf5plugin read of fzd's chunks: %s %s %s"
                          % (dstr, shape, cname))
                n_checked += shape[0]
    print("hdf5plugin: %d frames both ways" % n_checked)


def against_chunk2sparse(fz, rng):
    """bslz4-to-sparse's CPU chunk2sparse on u16 frames: the same lists."""
    ni, nj = 195, 207
    mask = (rng.random((ni, nj)) < 0.95).astype(np.uint8)
    c2s = bslz4_to_sparse.chunk2sparse(mask, np.dtype(np.uint16))
    for k in range(10):
        arr = frame(rng, np.uint16, ni * nj)
        chunk = pkg_chunk(LZ4, arr, 0)
        for cut in (0, 3, 10, 1000):
            n, (vals, idx) = c2s(chunk, cut)
            v, i, _ = fz.sparse(LZ4, chunk, np.uint16, ni * nj, cut, mask.ravel())
            check(same(i, idx[:n].copy()) and same(v, vals[:n].copy()),
                  "chunk2sparse differs: frame %d cut %d (%d and %d pixels)" % (k, cut, n, len(i)))
    print("chunk2sparse: 40 frame cuts, identical lists")


def top_n_and_products(fz, rng):
    n, rows = 20011, 50
    arr = frame(rng, np.uint16, n)
    chunk = pkg_chunk(LZ4, arr, 0)
    mask = (rng.random(n) < 0.9).astype(np.uint8)
    cand = np.flatnonzero((arr > 4) & (mask != 0))
    order = np.lexsort((cand, -arr[cand].astype(np.int64)))  # value down, index up
    for top in (1, 7, 100, len(cand), len(cand) + 5):
        v, i, _ = fz.sparse(LZ4, chunk, np.uint16, n, 4, mask, top_n=top)
        keep = np.sort(cand[order[:top]]).astype(np.uint32)
        check(same(i, keep) and same(v, arr[keep]), "top %d" % top)
    nnz = rng.integers(0, 300, rows)
    indptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.uint64)
    cols = rng.integers(0, n, int(indptr[-1])).astype(np.uint32)
    wf = rng.random(len(cols)).astype(np.float32)
    wi = rng.integers(-1000, 1000, len(cols)).astype(np.int32)
    for weights in ("f32", "i32"):
        csr = (indptr, cols, wf if weights == "f32" else None, wi if weights == "i32" else None)
        _, _, powder = fz.sparse(LZ4, chunk, np.uint16, n, 4, mask, csr=csr)
        for r in range(rows):
            s = 0.0 if weights == "f32" else 0
            for j in range(int(indptr[r]), int(indptr[r + 1])):
                c = cols[j]
                if mask[c]:
                    s += float(wf[j]) * float(arr[c]) if weights == "f32" else int(wi[j]) * int(arr[c])
            check(powder[r] == s, "%s product row %d: %r != %r" % (weights, r, powder[r], s))
    print("top-N: 5 sizes; products: f32 and i32 weights, %d rows each, exact" % rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--venv", required=True)
    a = ap.parse_args()
    ensure_venv(os.path.abspath(a.venv))
    global np, bitshuffle, hdf5plugin, h5py, bslz4_to_sparse
    import numpy as np
    import bitshuffle
    import hdf5plugin
    import h5py
    import bslz4_to_sparse
    fz = Fz(a.lib)
    rng = np.random.default_rng(29)
    codec_and_sparse(fz, rng)
    with tempfile.TemporaryDirectory() as tmp:
        hdf5plugin_chunks(fz, rng, tmp)
    against_chunk2sparse(fz, rng)
    top_n_and_products(fz, rng)
    print("PASS")


if __name__ == "__main__":
    main()
