#!/usr/bin/env python3
"""Device arrays through a real fzd on the GPU backend: CuPy arrays (and
PyTorch tensors where torch with CUDA is importable) sent as CUDA IPC
handles, compressed in place, the archives byte for byte those of the same
data sent from the host, device outputs for both directions, an array at an
offset inside its allocation, the clear errors (a strided array, a
too-small device output), and the engine in process (FZD_ENGINE_LIB)
making and reading the GPU daemon's archives byte for byte.  Reports SKIPPED (exit 77) without CuPy, a GPU, or
an fzd built with CUDA."""
import os
import sys
import unittest

import numpy as np

import fzdtest
from fzdtest import smooth_field

try:
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("no GPU")
except Exception as e:  # ImportError, CUDARuntimeError, no GPU
    print("SKIP: device arrays need CuPy and a GPU: %s" % e)
    sys.exit(fzdtest.SKIP)

import fzd

try:
    DAEMON = fzdtest.Daemon(backend="gpu")
except RuntimeError as e:
    print("SKIP: fzd cannot run the GPU backend here: %s" % e)
    sys.exit(fzdtest.SKIP)


class Device(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = fzd.Client(DAEMON.address, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        DAEMON.stop()

    def test_backend(self):
        self.assertEqual(self.c.backend, "gpu")

    def test_compress_device_input(self):
        h = smooth_field((512, 1024), np.float32)
        d = cupy.asarray(h)
        arc = self.c.compress(d, eb=1e-4, mode="rel")
        self.assertEqual(arc, self.c.compress(h, eb=1e-4, mode="rel"))
        back = self.c.decompress(arc)
        self.assertLessEqual(np.abs(back - h).max(), fzd.info(arc).eb_abs)

    def test_engine_in_process_agrees(self):
        # The GPU daemon's archives are the CPU engine's: the engine in this
        # process makes them byte for byte and decodes them bit for bit.
        h = smooth_field((512, 1024), np.float32)
        for kw in (dict(eb=1e-4, mode="rel"), dict(pipeline="fast", eb=1e-3, mode="abs"),
                   dict(pipeline="ratio", eb=1e-4), dict(pipeline="lossless")):
            arc = self.c.compress(h, **kw)
            self.assertEqual(fzd.compress(h, local=True, **kw), arc, kw)
            self.assertEqual(fzd.decompress(arc, local=True).tobytes(),
                             self.c.decompress(arc).tobytes(), kw)

    def test_device_outputs(self):
        h = smooth_field((300, 700), np.float64)
        d = cupy.asarray(h)
        want = self.c.compress(h, eb=1e-6, mode="abs")
        darc = cupy.zeros(h.nbytes + 65536, dtype=cupy.uint8)
        n = self.c.compress(d, eb=1e-6, mode="abs", out=darc)
        self.assertEqual(n, len(want))
        self.assertEqual(cupy.asnumpy(darc[:n]).tobytes(), want)
        dback = cupy.empty_like(d)
        r = self.c.decompress(darc[:n], out=dback)
        self.assertIs(r, dback)
        self.assertTrue(np.array_equal(cupy.asnumpy(dback), self.c.decompress(want)))
        # a device archive into a host array, and a host archive onto the device
        hback = self.c.decompress(darc[:n])
        self.assertTrue(np.array_equal(hback, self.c.decompress(want)))
        dback2 = cupy.zeros_like(d)
        self.c.decompress(want, out=dback2)
        self.assertTrue(bool((dback2 == dback).all()))
        with self.assertRaises(fzd.Error) as cm:
            self.c.compress(d, eb=1e-6, mode="abs", out=cupy.zeros(16, cupy.uint8))
        self.assertEqual(cm.exception.name, "ENOSPC")

    def test_offset_inside_allocation(self):
        big = cupy.asarray(smooth_field((1 << 20,), np.float32))
        part = big[12345:]  # contiguous, not at the allocation's base
        want = self.c.compress(cupy.asnumpy(part), eb=1e-3)
        self.assertEqual(self.c.compress(part, eb=1e-3), want)

    def test_strided_is_refused(self):
        d = cupy.asarray(smooth_field((64, 64), np.float32))[:, ::2]
        with self.assertRaises(fzd.Error) as cm:
            self.c.compress(d, eb=1e-3)
        self.assertEqual(cm.exception.name, "EINVAL")
        self.assertIn("contiguous", cm.exception.message)

    def test_torch(self):
        try:
            import torch
            if not torch.cuda.is_available():
                raise ImportError("no CUDA in torch")
        except ImportError as e:
            self.skipTest("PyTorch with CUDA: %s" % e)
        h = smooth_field((256, 256), np.float32)
        t = torch.from_numpy(h).cuda()
        self.assertEqual(self.c.compress(t, eb=1e-3), self.c.compress(h, eb=1e-3))

    def test_release(self):
        d = cupy.asarray(smooth_field((1000,), np.float32))
        self.c.compress(d, eb=1e-3)
        self.assertGreaterEqual(self.c.release_device(d), 1)
        self.assertGreaterEqual(self.c.release_device(), 0)


if __name__ == "__main__":
    fzdtest.main()
