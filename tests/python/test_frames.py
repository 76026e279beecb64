#!/usr/bin/env python3
"""fzd.Client.frames and fzd.frames.decode: chunks made by the engine's
encoder (fz_bslz4_encode, through ctypes) decode through a real fzd to the
same arrays as in this process and as numpy's cut of the original frames;
a mask and a matrix set up once serve several calls; a corrupt chunk fails
its frame only; the per-connection setup limit; an h5py dataset (when h5py
is importable), its file sent as a descriptor with the chunk table."""
import ctypes
import unittest

import numpy as np

import fzdtest

import fzd
from fzd import _engine, frames


def encode(a, codec=2):
    lib = _engine.library()
    fn = lib.fz_bslz4_encode
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                   ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                   ctypes.c_char_p, ctypes.c_size_t]
    a = np.ascontiguousarray(a)
    cap = a.nbytes * 2 + 4096
    out = ctypes.create_string_buffer(cap)
    n = fn(codec, a.ctypes.data, a.size, a.itemsize, 0, 3, out, cap, None, 0)
    assert n > 0, n
    return out.raw[:n]


def make_frames(n, shape=(37, 53), dtype=np.uint16, seed=5):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = rng.poisson(1.5, shape).astype(dtype)
        f.flat[rng.integers(0, f.size, 30)] = rng.integers(50, 900, 30)
        out.append(f)
    return out


class Frames(fzdtest.DaemonTest):
    def test_sparse_dense_match_numpy_and_local(self):
        for dtype, codec in ((np.uint16, "lz4"), (np.int32, "zstd"), (np.float32, "lz4")):
            fr = make_frames(4, dtype=dtype)
            ch = [encode(f, 2 if codec == "lz4" else 3) for f in fr]
            with fzd.Client(self.fzd.address) as c:
                got = c.frames(ch, shape=fr[0].shape, dtype=dtype, codec=codec, cut=3)
                dense = c.frames(ch, shape=fr[0].shape, dtype=dtype, codec=codec, dense=True)
            loc = frames.decode(ch, fr[0].shape, dtype, codec=codec, cut=3)
            for f, g, l, d in zip(fr, got, loc, dense):
                flat = f.reshape(-1)
                idx = np.flatnonzero(flat > 3)
                self.assertEqual(g.status, 0)
                self.assertEqual(g.count, idx.size)
                np.testing.assert_array_equal(g.indices, idx)
                np.testing.assert_array_equal(g.values, flat[idx])
                self.assertEqual(g.values.dtype, np.dtype(dtype))
                np.testing.assert_array_equal(l.indices, g.indices)
                np.testing.assert_array_equal(l.values, g.values)
                np.testing.assert_array_equal(d.values, f)

    def test_top_n_and_bad_frame(self):
        fr = make_frames(5)
        ch = [encode(f) for f in fr]
        bad = bytearray(ch[2])
        bad[12:16] = b"\x7f\x00\x00\x00"  # the first block's length, past the chunk
        ch[2] = bytes(bad)
        with fzd.Client(self.fzd.address) as c:
            got = c.frames(ch, shape=fr[0].shape, dtype=np.uint16, cut=10, top_n=5)
            self.assertEqual(c.ping() > 0, True)
        loc = frames.decode(ch, fr[0].shape, np.uint16, cut=10, top_n=5)
        for i, (g, l) in enumerate(zip(got, loc)):
            if i == 2:
                self.assertNotEqual(g.status, 0)
                self.assertIn(g.error.name, ("ECORRUPT", "ETRUNC"))
                self.assertEqual(l.status, g.status)
                continue
            self.assertEqual(len(g.values), 5)
            np.testing.assert_array_equal(g.indices, l.indices)
            np.testing.assert_array_equal(g.values, l.values)
            # The five largest, in pixel order.
            flat = fr[i].reshape(-1)
            self.assertEqual(sorted(g.values.tolist()), sorted(flat)[-5:])
            self.assertTrue((np.diff(g.indices.astype(np.int64)) > 0).all())

    def test_setup_once_used_twice_and_limits(self):
        fr = make_frames(3)
        shape = fr[0].shape
        npix = fr[0].size
        ch = [encode(f) for f in fr]
        mask = (np.arange(npix) % 5 != 0).astype(np.uint8)
        rows = 6
        indptr = np.linspace(0, npix, rows + 1).astype(np.uint64)
        indices = np.arange(npix, dtype=np.uint32)[::-1].copy()
        for weights in (np.full(npix, 0.25, np.float32), (np.arange(npix) % 4).astype(np.int32)):
            with fzd.Client(self.fzd.address) as c:
                sid = c.frames_setup(shape, mask=mask, csr=(indptr, indices, weights))
                for cut in (2, 20):
                    got = c.frames(ch, shape=shape, dtype=np.uint16, cut=cut, setup=sid)
                    loc = frames.decode(ch, shape, np.uint16, cut=cut, mask=mask,
                                        csr=(indptr, indices, weights))
                    for f, g, l in zip(fr, got, loc):
                        flat = f.reshape(-1)
                        idx = np.flatnonzero((flat > cut) & (mask != 0))
                        np.testing.assert_array_equal(g.indices, idx)
                        np.testing.assert_array_equal(g.powder, l.powder)
                        self.assertEqual(g.powder.dtype, l.powder.dtype)
                        # The product of the masked frame, summed by numpy.
                        used = np.where(mask != 0, flat, 0)
                        want = [np.sum(weights[indptr[r]:indptr[r + 1]].astype(np.float64) *
                                       used[indices[indptr[r]:indptr[r + 1]]])
                                for r in range(rows)]
                        np.testing.assert_allclose(g.powder, want, rtol=1e-12)
                # Eight setups a connection: the ninth is refused.
                for _ in range(7):
                    c.frames_setup(shape, mask=mask)
                with self.assertRaises(fzd.Error) as cm:
                    c.frames_setup(shape, mask=mask)
                self.assertEqual(cm.exception.name, "ERANGE")
                with self.assertRaises(fzd.Error) as cm:
                    c.frames(ch, shape=shape, dtype=np.uint16, setup=sid + 100)
                self.assertEqual(cm.exception.name, "EPARAMS")

    def test_h5py_dataset(self):
        try:
            import h5py
        except ImportError:
            self.skipTest("h5py is not installed")
        import os
        import tempfile
        fr = make_frames(3)
        # The codec comes from the filter's parameters (cd_values[4]): a
        # zstd dataset read as LZ4 would fail every frame.
        for name, code in (("lz4", 2), ("zstd", 3)):
            with self.subTest(codec=name), tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "f.h5")
                with h5py.File(path, "w") as h:
                    # The bitshuffle filter (32008) is declared but need not be
                    # installed: the chunks are written raw.
                    ds = h.create_dataset("data", shape=(3,) + fr[0].shape, dtype=np.uint16,
                                          chunks=(1,) + fr[0].shape, compression=32008,
                                          compression_opts=(0, 2, 2, 0, code),
                                          allow_unknown_filter=True)
                    for i, f in enumerate(fr):
                        ds.id.write_direct_chunk((i, 0, 0), encode(f, code), filter_mask=0)
                with h5py.File(path, "r") as h, fzd.Client(self.fzd.address) as c:
                    self.assertEqual(frames.codec_of(h["data"]), name)
                    got = c.frames(h["data"], cut=3)
                    # On the Unix socket the file went as a descriptor with
                    # its chunk table, not the chunks' bytes.
                    self.assertEqual(c.fds_sent, 1)
                    # Dense: the file in, the frames out through a memfd.
                    dense = c.frames(h["data"], dense=True)
                    self.assertEqual(c.fds_sent, 3)
                    loc = frames.decode(h["data"], cut=3)
                for f, g, l, d in zip(fr, got, loc, dense):
                    np.testing.assert_array_equal(d.values, f)
                    self.assertEqual((g.status, l.status), (0, 0))
                    idx = np.flatnonzero(f.reshape(-1) > 3)
                    np.testing.assert_array_equal(g.indices, idx)
                    np.testing.assert_array_equal(l.indices, idx)
        # Four parameters: the filter shuffles bits and compresses nothing,
        # so the chunks are no frames chunks and the dataset is refused.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "f.h5")
            with h5py.File(path, "w") as h:
                h.create_dataset("data", shape=(3,) + fr[0].shape, dtype=np.uint16,
                                 chunks=(1,) + fr[0].shape, compression=32008,
                                 compression_opts=(0, 2, 2, 0), allow_unknown_filter=True)
            with h5py.File(path, "r") as h:
                with self.assertRaises(fzd.Error) as cm:
                    frames.codec_of(h["data"])
                self.assertEqual(cm.exception.name, "EINVAL")

class FramesThroughAMemfd(fzdtest.DaemonTest):
    """Dense frames come back through a memfd: more of them than one reply
    may hold (max_inline_bytes made small here) still decode, with a
    matrix's sums beside them."""
    settings = {"max_inline_bytes": 32768}

    def test_dense_frames_past_max_inline_bytes(self):
        fr = make_frames(24)
        ch = [encode(f) for f in fr]
        npix = fr[0].size
        rng = np.random.default_rng(3)
        indptr = np.array([0, 40, 100, 100, 180], dtype=np.uint64)
        indices = np.sort(rng.choice(npix, 180, replace=False)).astype(np.uint32)
        weights = rng.integers(1, 5, 180).astype(np.int32)
        with fzd.Client(self.fzd.address) as c:
            sid = c.frames_setup(fr[0].shape, csr=(indptr, indices, weights))
            got = c.frames(ch, shape=fr[0].shape, dtype=np.uint16, dense=True, setup=sid)
            # The same frames inline are too many for one reply.
            with self.assertRaises(fzd.Error) as cm:
                c.call("frames", {"dtype": "u16", "shape": list(fr[0].shape),
                                  "output": "dense", "chunks": ch})
            self.assertEqual(cm.exception.name, "EMSGSIZE")
        self.assertEqual(len(got), len(fr))
        for f, g in zip(fr, got):
            self.assertEqual(g.status, 0)
            np.testing.assert_array_equal(g.values, f)
            flat = f.reshape(-1).astype(np.int64)
            want = [int((flat[indices[a:b]] * weights[a:b]).sum())
                    for a, b in zip(indptr[:-1], indptr[1:])]
            np.testing.assert_array_equal(g.powder, want)
            self.assertEqual(g.powder.dtype, np.int64)


if __name__ == "__main__":
    unittest.main()
