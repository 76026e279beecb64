#!/usr/bin/env python3
"""The fzd Python package against a real fzd (CPU backend): round trips of
every dtype and several shapes, errors (fzd.Error with name, code and
message), memfds for large arrays and results, output buffers, the batch
form, TCP (inline only, with a token), fzd.info() against the daemon's own
archives (a corrupted and a truncated one too), and device arrays refused
clearly by a CPU daemon."""
import os
import re
import socket
import sys
import unittest

import numpy as np

import fzd
import fzdtest
from fzdtest import smooth_field


class RoundTrips(fzdtest.DaemonTest):
    def setUp(self):
        self.c = fzd.Client(self.fzd.address, timeout=300)

    def tearDown(self):
        self.c.close()

    def check_bound(self, a, back, arc):
        h = fzd.info(arc)
        self.assertEqual(back.dtype, a.dtype.newbyteorder("<"))
        self.assertEqual(back.shape, a.shape)
        err = np.abs(back.astype(np.float64) - a.astype(np.float64)).max()
        self.assertGreater(h.eb_abs, 0)
        self.assertLessEqual(err, h.eb_abs)
        return h

    def test_float_shapes_and_modes(self):
        for dt in (np.float32, np.float64):
            for shape in ((1000,), (61, 37), (9, 17, 33), (3, 5, 7, 11)):
                for pipeline, eb, mode in (("balanced", 1e-3, "rel"), ("fast", 1e-2, "abs")):
                    with self.subTest(dtype=dt, shape=shape, pipeline=pipeline):
                        a = smooth_field(shape, dt)
                        arc = self.c.compress(a, pipeline=pipeline, eb=eb, mode=mode,
                                              verify=True)
                        max_error = self.c.last_result["max_error"]
                        self.assertIsInstance(arc, bytes)
                        h = self.check_bound(a, self.c.decompress(arc), arc)
                        self.assertEqual(h.mode, mode)
                        self.assertEqual(h.eb, eb)
                        self.assertLessEqual(max_error, h.eb_abs)

    def test_ratio_preset_and_version_7_headers(self):
        # The ratio preset writes format version 7 (u32 chunk table, 256 KiB
        # chunks, interpolation over the shape): info() reads it as the
        # decoder does and names the chain the daemon ran.
        for dt in (np.float32, np.float64):
            for shape in ((100000,), (301, 257), (9, 40, 33), (3, 5, 7, 11)):
                with self.subTest(dtype=dt, shape=shape):
                    a = smooth_field(shape, dt)
                    arc = self.c.compress(a, pipeline="ratio", eb=1e-3, mode="rel", verify=True)
                    res = self.c.last_result
                    h = self.check_bound(a, self.c.decompress(arc), arc)
                    self.assertEqual(h.version, 7)
                    self.assertEqual(h.chunk_bytes, 256 * 1024)
                    self.assertEqual(h.chain, res["chain"])
                    self.assertLessEqual(res["max_error"], h.eb_abs)
                    self.assertIn("huffman", h.chain)
                    bad = bytearray(arc)
                    bad[h.header_bytes - 5] ^= 1  # the chunk table's last byte
                    with self.assertRaises(fzd.Error) as cm:
                        fzd.info(bad)
                    self.assertIn(cm.exception.name, ("ECORRUPT", "ETRUNC"))

    def test_chain_with_its_own_bound(self):
        a = smooth_field((100, 120), np.float32)
        arc = self.c.compress(a, pipeline="quant(eb=0.01,mode=abs) | diff | bitshuffle | rze")
        h = fzd.info(arc)
        self.assertEqual((h.mode, h.eb, h.eb_abs), ("abs", 0.01, 0.01))
        self.assertLessEqual(np.abs(self.c.decompress(arc) - a).max(), 0.01)
        with self.assertRaises(fzd.Error) as cm:  # two bounds that disagree
            self.c.compress(a, pipeline="quant(eb=0.01,mode=abs) | diff | bitshuffle | rze",
                            eb=1e-3, mode="rel")
        self.assertEqual(cm.exception.name, "EPIPELINE")

    def test_pwrel(self):
        a = smooth_field((200, 300), np.float64) + 100.0
        arc = self.c.compress(a, eb=1e-4, mode="pwrel")
        back = self.c.decompress(arc)
        rel = np.abs(back - a) / np.abs(a)
        self.assertLessEqual(rel.max(), fzd.info(arc).eb_abs)

    def test_integers_and_lossless_are_exact(self):
        rng = np.random.default_rng(3)
        for dt in ("u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8"):
            with self.subTest(dtype=dt):
                a = (rng.integers(0, 50, (40, 70)).cumsum(axis=1)).astype(dt)
                arc = self.c.compress(a, pipeline="lossless")
                back = self.c.decompress(arc)
                self.assertEqual(back.dtype, np.dtype(dt))
                self.assertTrue(np.array_equal(back, a))
        f = smooth_field((50, 50), np.float64)
        f[0, 0] = np.nan
        f[0, 1] = -0.0
        back = self.c.decompress(self.c.compress(f, pipeline="lossless"))
        self.assertEqual(back.tobytes(), f.tobytes())

    def test_views_big_endian_and_scalars(self):
        a = smooth_field((64, 80), np.float32)
        v = a[::2, 1::3]  # not contiguous
        self.check_bound(v, self.c.decompress(self.c.compress(v, eb=1e-3)),
                         self.c.compress(v, eb=1e-3))
        be = a.astype(">f4")
        back = self.c.decompress(self.c.compress(be, pipeline="lossless"))
        self.assertTrue(np.array_equal(back, a))
        lst = [1.5, 2.5, 3.5]
        self.assertTrue(np.array_equal(self.c.decompress(self.c.compress(lst, pipeline="lossless")),
                                       np.array(lst)))

    def test_fill_value(self):
        a = smooth_field((100, 100), np.float32)
        a[10:20, :] = -1e10
        arc = self.c.compress(a, eb=1e-3, fill_value=-1e10)
        h = fzd.info(arc)
        self.assertEqual(h.version, 2)
        self.assertEqual(h.fill_value, -1e10)
        back = self.c.decompress(arc)
        self.assertTrue(np.all(back[10:20, :] == np.float32(-1e10)))
        self.assertLessEqual(np.abs(back - a).max(), h.eb_abs)

    def test_output_buffers(self):
        a = smooth_field((256, 256), np.float32)
        want = self.c.compress(a, eb=1e-3)
        for size in (64 << 10, 16 << 20):  # inline and through the memfd
            with self.subTest(size=size):
                b = smooth_field((size // 4,), np.float32)
                want = self.c.compress(b, eb=1e-3)
                out = bytearray(len(want) + 100)
                n = self.c.compress(b, eb=1e-3, out=out)
                self.assertEqual(n, len(want))
                self.assertEqual(bytes(out[:n]), want)
                small = bytearray(len(want) // 2)
                with self.assertRaises(fzd.Error) as cm:
                    self.c.compress(b, eb=1e-3, out=small)
                self.assertEqual(cm.exception.name, "ENOSPC")
                dst = np.empty_like(b)
                r = self.c.decompress(want, out=dst)
                self.assertIs(r, dst)
                self.assertTrue(np.array_equal(dst, self.c.decompress(want)))
                with self.assertRaises(fzd.Error) as cm:
                    self.c.decompress(want, out=np.empty(10, np.float32))
                self.assertEqual(cm.exception.name, "ENOSPC")
        with self.assertRaises(fzd.Error):
            self.c.compress(a, eb=1e-3, out=b"read-only")

    def test_batch(self):
        arrays = [smooth_field((100 + 20 * i, 50), np.float32, seed=i) for i in range(9)]
        arrays.append(smooth_field((1 << 20,), np.float32))  # one through a memfd
        single = [self.c.compress(a, eb=1e-3) for a in arrays]
        many = self.c.compress_many(arrays, eb=1e-3, depth=4)
        self.assertEqual(many, single)
        backs = self.c.decompress_many(many, depth=3)
        for arc, b in zip(single, backs):
            self.assertTrue(np.array_equal(b, self.c.decompress(arc)))
        # A failing job in the batch: the others all ran, the error comes out.
        bad = [arrays[0], np.zeros(10, np.complex64), arrays[1]]
        with self.assertRaises(fzd.Error) as cm:
            self.c.compress_many(bad, eb=1e-3)
        self.assertEqual(cm.exception.name, "EDTYPE")
        self.assertEqual(self.c.ping() > 0, True)  # the connection still works

    def test_service_calls(self):
        self.assertEqual(self.c.backend, "cpu")
        self.assertEqual(self.c.pid, self.fzd.proc.pid)
        self.assertIn("jobs_done", self.c.stats())
        self.assertIn("queue_capacity", self.c.status())
        self.assertIn("balanced", [p["name"] for p in self.c.presets()])


class Errors(fzdtest.DaemonTest):
    def setUp(self):
        self.c = fzd.Client(self.fzd.address, timeout=120)

    def tearDown(self):
        self.c.close()

    def expect(self, name, fn, *args, **kw):
        with self.assertRaises(fzd.Error) as cm:
            fn(*args, **kw)
        e = cm.exception
        self.assertEqual(e.name, name)
        self.assertEqual(e.code, dict((n, c) for c, n, _ in fzd.ERRORS)[name])
        self.assertIsInstance(e.message, str)
        self.assertTrue(e.message)
        return e

    def test_bound_errors(self):
        a = smooth_field((100, 100))
        e = self.expect("EBOUND", self.c.compress, a, eb=-1e-3)
        self.assertEqual(e.code, -4008)
        self.assertIn("-0.001", e.message)
        e = self.expect("EBOUND", self.c.compress, a, eb=1.5, mode="pwrel")
        self.assertIn("1.5", e.message)
        # The connection stays usable after the daemon's errors.
        self.assertTrue(np.array_equal(self.c.decompress(self.c.compress(a, pipeline="lossless")),
                                       a))

    def test_other_errors(self):
        a = smooth_field((100, 100))
        e = self.expect("EPIPELINE", self.c.compress, a, pipeline="no-such-preset", eb=1e-3)
        self.assertIn("no-such-preset", e.message)
        self.expect("EPARAMS", self.c.compress, a, eb=1e-3, mode="absolute")
        self.expect("EDTYPE", self.c.compress, np.zeros(4, np.complex128))
        self.expect("EMETHOD", self.c.call, "no_such_method")
        self.expect("EFORMAT", self.c.decompress, b"not an archive at all")
        e = self.expect("ECONNREFUSED", fzd.Client, "unix:" + self.fzd.socket + ".none")
        self.assertIn(".none", e.message)
        self.expect("EINVAL", fzd.Client, "tcp:nohostport")

    def test_device_arrays_on_cpu_backend(self):
        e = self.expect("ENOGPU", self.c.compress, FakeDevice(), eb=1e-3)
        self.assertIn("cpu", e.message)
        arc = self.c.compress(np.arange(10, dtype=np.float32), pipeline="lossless")
        self.expect("ENOGPU", self.c.decompress, arc, out=FakeDevice())

    def test_error_table_matches_fz_error_h(self):
        path = os.path.join(os.environ["FZD_SOURCE_DIR"], "engine", "include", "fz_error.h")
        with open(path) as f:
            table = re.findall(r'XX\((E[A-Z0-9]+), (-\d+), "([^"]*)"\)', f.read())
        self.assertTrue(table)
        self.assertEqual([(int(c), n, m) for n, c, m in table], list(fzd.ERRORS))


class Memfds(fzdtest.DaemonTest):
    # A small max_inline: an inline message of these sizes would be refused
    # with EMSGSIZE, so a job that works went through descriptors.
    settings = {"max_inline_bytes": 1 << 20, "max_message_bytes": (1 << 20) + 4096}

    def test_big_array_travels_as_memfd(self):
        c = fzd.Client(self.fzd.address, timeout=300)
        self.assertEqual(c.max_inline, 1 << 20)
        a = smooth_field((1024, 4096), np.float32)  # 16 MiB
        arc = c.compress(a, pipeline="lossless")
        self.assertGreater(len(arc), 1 << 20)   # the result could not come inline
        self.assertEqual(c.fds_sent, 2)         # input memfd and result memfd
        self.assertLess(c.bytes_sent, 4096)     # the data never crossed the socket
        back = c.decompress(arc)
        self.assertEqual(c.fds_sent, 4)
        self.assertLess(c.bytes_sent, 8192)
        self.assertTrue(np.array_equal(back, a))
        st = c.stats()
        self.assertGreaterEqual(st["compress"]["bytes_in"], a.nbytes)
        # Repeated jobs reuse the client's memfd (no new slot per job).
        for _ in range(3):
            c.compress(a, eb=1e-3)
        self.assertEqual(len(c._slots), 1)
        c.close()

    def test_results_stay_put(self):
        # Result memfds are reused for archives and for arrays copied into
        # an out; a returned array maps its memfd and must keep its values.
        c = fzd.Client(self.fzd.address, timeout=300)
        a1 = smooth_field((1024, 1024), np.float32)
        a2 = a1 + np.float32(1)
        arc1 = c.compress(a1, pipeline="lossless")
        arc2 = c.compress(a2, pipeline="lossless")
        b1 = c.decompress(arc1)
        out = np.empty_like(a1)
        c.decompress(arc2, out=out)
        arc3 = c.compress(a2, pipeline="lossless")
        b2 = c.decompress(arc2)
        c.decompress(arc1, out=out)
        self.assertEqual(arc3, arc2)
        self.assertTrue(np.array_equal(b1, a1))
        self.assertTrue(np.array_equal(b2, a2))
        self.assertTrue(np.array_equal(out, a1))
        self.assertEqual(fzd.info(arc1).shape, (1024, 1024))
        c.close()
        self.assertTrue(np.array_equal(b1, a1))  # outlives the client

    def test_shared_buffers_are_not_copied(self):
        c = fzd.Client(self.fzd.address, timeout=300)
        buf = c.empty((2048, 2048), np.float32)  # 16 MiB
        self.assertTrue(np.all(buf == 0))
        buf[...] = smooth_field((2048, 2048), np.float32)
        want = fzd.Client(self.fzd.address).compress(np.array(buf), eb=1e-3)
        arc = c.compress(buf, eb=1e-3)
        self.assertEqual(arc, want)
        self.assertEqual(c._slots, [])   # no staging copy was made
        self.assertEqual(c.fds_sent, 2)  # the buffer's memfd and the result's
        part = buf[1024:]                # a region at an offset inside it
        self.assertEqual(c.compress(part, eb=1e-3),
                         fzd.Client(self.fzd.address).compress(np.array(part), eb=1e-3))
        self.assertEqual(c._slots, [])
        buf[0, 0] = 1234.5               # written in place: the next job sees it
        back = c.decompress(c.compress(buf, pipeline="lossless"))
        self.assertEqual(back[0, 0], np.float32(1234.5))
        self.assertEqual(len(c._buffers), 1)
        del buf, part
        import gc
        gc.collect()
        self.assertEqual(len(c._buffers), 0)  # freed with its last view
        c.close()

    def test_threshold_decides(self):
        a = smooth_field((200, 300), np.float32)  # 240 KB
        c = fzd.Client(self.fzd.address, memfd_threshold=1 << 30)
        arc = c.compress(a, eb=1e-3)
        self.assertEqual(c.fds_sent, 0)
        self.assertGreater(c.bytes_sent, a.nbytes)
        c.close()
        c = fzd.Client(self.fzd.address, memfd_threshold=4096)
        self.assertEqual(c.compress(a, eb=1e-3), arc)
        self.assertEqual(c.fds_sent, 2)
        self.assertLess(c.bytes_sent, 4096)
        c.close()


class Tcp(fzdtest.DaemonTest):
    settings = {"tcp_enabled": True, "tcp_port": 0, "tcp_token": "s3cret",
                "max_inline_bytes": 1 << 20, "max_message_bytes": (1 << 20) + 4096}

    def test_inline_with_token(self):
        self.assertIsNotNone(self.fzd.tcp_address, self.fzd.ready_note)
        c = fzd.Client(self.fzd.tcp_address, token="s3cret", timeout=120)
        self.assertEqual(c.transport, "tcp")
        a = smooth_field((300, 300), np.float32)
        arc = c.compress(a, eb=1e-3)
        self.assertEqual(c.fds_sent, 0)
        self.assertLessEqual(np.abs(c.decompress(arc) - a).max(), fzd.info(arc).eb_abs)
        big = np.zeros(1 << 19, np.float32)  # 2 MiB: over max_inline, refused before sending
        sent = c.bytes_sent
        with self.assertRaises(fzd.Error) as cm:
            c.compress(big, pipeline="lossless")
        self.assertEqual(cm.exception.name, "EMSGSIZE")
        self.assertEqual(c.bytes_sent, sent)
        with self.assertRaises(fzd.Error) as cm:
            c.compress(FakeDevice(), eb=1e-3)
        self.assertEqual(cm.exception.name, "ETRANSPORT")
        c.close()
        os.environ["FZD_TOKEN"] = "s3cret"
        try:
            c = fzd.Client(self.fzd.tcp_address)
            self.assertEqual(c.ping() > 0, True)
            c.close()
        finally:
            del os.environ["FZD_TOKEN"]
        with self.assertRaises(fzd.Error) as cm:
            fzd.Client(self.fzd.tcp_address, token="wrong")
        self.assertEqual(cm.exception.name, "EAUTH")


class FakeDevice:
    """What CuPy arrays and PyTorch CUDA tensors expose."""

    def __init__(self, shape=(10,), strides=None, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "version": 3,
                                         "data": (0x7f0000000000, False), "strides": strides}


class DeviceInterface(unittest.TestCase):
    """The parts of the device path that need no GPU."""

    def test_interface_checks(self):
        from fzd import _cuda
        shape, dt, ptr, ro, stream = _cuda._interface(FakeDevice((4, 6)), "input")
        self.assertEqual((shape, dt, ptr, ro, stream), ((4, 6), np.dtype("<f4"), 0x7f0000000000,
                                                        False, None))
        _cuda._interface(FakeDevice((4, 6), strides=(24, 4)), "input")  # C order, explicit
        with self.assertRaises(fzd.Error) as cm:
            _cuda._interface(FakeDevice((4, 6), strides=(4, 16)), "input")
        self.assertEqual(cm.exception.name, "EINVAL")
        self.assertIn("C-contiguous", cm.exception.message)

    def test_no_driver_is_enogpu(self):
        import ctypes
        try:
            ctypes.CDLL("libcuda.so.1")
            self.skipTest("this machine has a CUDA driver")
        except OSError:
            pass
        from fzd import _cuda
        with self.assertRaises(fzd.Error) as cm:
            _cuda.Cuda()
        self.assertEqual(cm.exception.name, "ENOGPU")
        self.assertIn("libcuda.so.1", cm.exception.message)


class DefaultAddress(fzdtest.DaemonTest):
    def test_local_rank_template(self):
        from fzd._client import expand_address, _LOCAL_RANK_VARS
        saved = {k: os.environ.pop(k) for k in _LOCAL_RANK_VARS + ("FZD_DAEMONS_PER_NODE",)
                 if k in os.environ}
        try:
            with self.assertRaises(fzd.Error) as cm:
                expand_address("unix:/run/fzd/gpu%l.sock")
            self.assertEqual(cm.exception.name, "EINVAL")
            self.assertIn("SLURM_LOCALID", cm.exception.message)
            os.environ["SLURM_LOCALID"] = "6"
            self.assertEqual(expand_address("unix:/run/fzd/gpu%l.sock"), "unix:/run/fzd/gpu6.sock")
            os.environ["OMPI_COMM_WORLD_LOCAL_RANK"] = "5"  # Open MPI's comes first
            os.environ["FZD_DAEMONS_PER_NODE"] = "4"
            self.assertEqual(expand_address("/x/%l-100%%"), "/x/1-100%")
            with self.assertRaises(fzd.Error):
                expand_address("/x/%d")
            # A real connection through a template: the daemon's socket is d.sock -> "%l"
            os.environ["OMPI_COMM_WORLD_LOCAL_RANK"] = "0"
            link_dir = os.path.dirname(self.fzd.socket)
            os.symlink(self.fzd.socket, os.path.join(link_dir, "gpu0.sock"))
            with fzd.Client("unix:" + os.path.join(link_dir, "gpu%l.sock")) as c:
                self.assertEqual(c.pid, self.fzd.proc.pid)
        finally:
            for k in _LOCAL_RANK_VARS + ("FZD_DAEMONS_PER_NODE",):
                os.environ.pop(k, None)
            os.environ.update(saved)

    def test_fzd_socket_variable(self):
        os.environ["FZD_SOCKET"] = self.fzd.socket  # a plain path
        try:
            with fzd.Client() as c:
                self.assertEqual(c.pid, self.fzd.proc.pid)
        finally:
            del os.environ["FZD_SOCKET"]


class Info(fzdtest.DaemonTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with fzd.Client(cls.fzd.address) as c:
            cls.a = smooth_field((300, 500), np.float32)
            cls.arc = c.compress(cls.a, eb=1e-4, mode="rel", verify=True)
            cls.res = c.last_result
            cls.lossless = c.compress(np.arange(5000, dtype=np.int32), pipeline="lossless")

    def test_crc32c(self):
        self.assertEqual(fzd.crc32c(b"123456789"), 0xE3069283)  # the check value
        self.assertEqual(fzd.crc32c(b""), 0)
        self.assertEqual(fzd.crc32c(b"6789", fzd.crc32c(b"12345")), 0xE3069283)

    def test_header_fields(self):
        h = fzd.info(self.arc)
        self.assertEqual(h.dtype, "f32")
        self.assertEqual(h.numpy_dtype, np.dtype("<f4"))
        self.assertEqual(h.shape, (300, 500))
        self.assertEqual(h.raw_bytes, self.a.nbytes)
        self.assertEqual(h.archive_bytes, len(self.arc))
        self.assertEqual(h.raw_bytes, self.res["bytes_in"])
        self.assertEqual(h.archive_bytes, self.res["bytes_out"])
        self.assertEqual(h.eb_abs, self.res["eb_abs"])
        self.assertEqual(h.chain, self.res["chain"])
        self.assertEqual(h.mode, "rel")
        self.assertEqual(h.chunks, -(-h.raw_bytes // h.chunk_bytes))
        h2 = fzd.info(self.lossless)
        self.assertEqual((h2.dtype, h2.shape, h2.eb_abs, h2.mode), ("i32", (5000,), 0.0, None))
        self.assertEqual(h2.as_dict()["shape"], [5000])

    def test_corrupt_truncated_and_foreign(self):
        bad = bytearray(self.arc)
        bad[9] ^= 0x01  # inside the shape: the header CRC catches it
        with self.assertRaises(fzd.Error) as cm:
            fzd.info(bad)
        self.assertEqual((cm.exception.name, cm.exception.code), ("ECORRUPT", -4004))
        self.assertIn("CRC", cm.exception.message)
        # The daemon agrees that it is corrupt.
        with fzd.Client(self.fzd.address) as c:
            with self.assertRaises(fzd.Error) as cm2:
                c.call("decompress", {"data": bytes(bad)})
            self.assertEqual(cm2.exception.name, "ECORRUPT")
        for n in (3, 7, 20, len(self.arc) - 1):
            with self.subTest(length=n):
                with self.assertRaises(fzd.Error) as cm:
                    fzd.info(self.arc[:n])
                self.assertEqual(cm.exception.name, "EFORMAT" if n < 4 else "ETRUNC")
        with self.assertRaises(fzd.Error) as cm:
            fzd.info(self.arc + b"x")
        self.assertEqual(cm.exception.name, "ECORRUPT")
        ver = bytearray(self.arc)
        ver[4] = 9
        with self.assertRaises(fzd.Error) as cm:
            fzd.info(ver)
        self.assertEqual(cm.exception.name, "EVERSION")
        with self.assertRaises(fzd.Error) as cm:
            fzd.info(b"PK\x03\x04 a zip file")
        self.assertEqual(cm.exception.name, "EFORMAT")


if __name__ == "__main__":
    fzdtest.main()
