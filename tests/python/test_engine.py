#!/usr/bin/env python3
"""fzd.compress and fzd.decompress with the engine in this process
(FZD_ENGINE_LIB, the build's libfzengine.so) and through a real fzd: the
archives of both are byte for byte the same for every dtype, preset and
option tried, and each decodes the other's to the same bits; local=None
takes the daemon when one answers and the engine otherwise, local=False
refuses to run without one; decompress(out=) is checked against the
archive's dtype and shape before anything is decoded, on both paths (an
archive of another dtype with the same byte count, a small archive of a
huge array); damaged archives give the engine's errors; the default
socket lookup follows $FZD_SOCKET, /run/fzd/fzd.sock, then
$XDG_RUNTIME_DIR/fzd/fzd.sock; the engine library is looked up as the
package says: $FZD_ENGINE_LIB, then the package's own, then the system's
libfzengine.so.N."""
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

import fzdtest
from fzdtest import smooth_field

import fzd
from fzd import _engine

NOWHERE = "unix:/nonexistent/fzd.sock"


class Engine(fzdtest.DaemonTest):
    def setUp(self):
        self.c = fzd.Client(self.fzd.address, timeout=300)

    def tearDown(self):
        self.c.close()

    def test_library_is_the_builds(self):
        self.assertEqual(_engine.library()._name, os.environ["FZD_ENGINE_LIB"])
        self.assertTrue(fzd.engine_available())

    def test_archives_are_the_daemons(self):
        rng = np.random.default_rng(7)
        f32 = smooth_field((300, 500), np.float32)
        f32[3, 4], f32[5, 6], f32[7, 8] = np.nan, np.inf, -0.0
        cases = [
            (f32, dict(pipeline="balanced", eb=1e-3, mode="rel")),
            (f32, dict(pipeline="fast", eb=0.01, mode="abs")),
            (f32, dict(pipeline="balanced", eb=1e-2, mode="pwrel")),
            (smooth_field((40, 50, 60), np.float64), dict(pipeline="ratio", eb=1e-5)),
            (smooth_field((20, 30, 40), np.float32), dict(pipeline="ratio", eb=1e-3)),
            (f32, dict(pipeline="lossless")),
            (f32, dict(pipeline="quant(eb=0.5,mode=abs) | diff(map=negabinary) | bitpack")),
            (np.where(f32 > 5, np.float32(-9999), f32), dict(eb=1e-4, fill_value=-9999)),
            (rng.integers(-3000, 3000, (64, 64, 8)).astype(np.int16), dict(pipeline="lossless")),
            (rng.integers(0, 1 << 40, 5000).astype(np.uint64), dict(pipeline="lossless")),
            (rng.integers(0, 900, (300, 200)).astype(np.int32) + np.arange(200, dtype=np.int32),
             dict(pipeline="lossless-ratio")),
            (np.arange(4 << 20, dtype=np.float32), dict(eb=1e-4)),  # through a memfd
            (np.float32(2.5), dict(pipeline="lossless")),
        ]
        for a, kw in cases:
            with self.subTest(dtype=a.dtype, shape=a.shape, **kw):
                local = fzd.compress(a, local=True, **kw)
                remote = self.c.compress(a, **kw)
                self.assertEqual(local, remote)
                # info() reads the chain as the daemon spells it.
                self.assertEqual(fzd.info(local).chain, self.c.last_result["chain"])
                self.assertEqual(fzd.compress(a, local=False, address=self.fzd.address, **kw),
                                 remote)
                mine = fzd.decompress(remote, local=True)
                theirs = self.c.decompress(local)
                self.assertEqual(mine.dtype, theirs.dtype)
                self.assertEqual(mine.shape, theirs.shape)
                self.assertEqual(mine.tobytes(), theirs.tobytes())
                h = fzd.info(local)
                self.assertEqual(mine.size, max(1, a.size))
                if a.ndim == 0:  # stored as (1,); a 0-d out gets shape () back
                    out0 = np.empty((), a.dtype)
                    self.assertIs(fzd.decompress(remote, out=out0, local=True), out0)
                    self.assertEqual((out0.shape, out0.tobytes()), ((), a.tobytes()))
                if h.eb_abs == 0:
                    self.assertEqual(mine.tobytes(), np.ascontiguousarray(a).tobytes())

    def test_daemon_first_then_the_engine(self):
        a = smooth_field((200, 300), np.float32)
        before = self.c.stats()["compress"]["count"]
        fzd.compress(a, eb=1e-3, address=self.fzd.address)
        fzd.decompress(fzd.compress(a, eb=1e-3, address=self.fzd.address),
                       address=self.fzd.address)
        after = self.c.stats()["compress"]["count"]
        self.assertEqual(after - before, 2)  # the daemon answered: it compressed
        # No daemon there: the engine here, same archive.
        self.assertEqual(fzd.compress(a, eb=1e-3, address=NOWHERE),
                         self.c.compress(a, eb=1e-3))
        self.assertEqual(self.c.stats()["compress"]["count"], after + 1)
        with self.assertRaises(fzd.Error) as cm:
            fzd.compress(a, eb=1e-3, local=False, address=NOWHERE)
        self.assertEqual(cm.exception.name, "ECONNREFUSED")
        with self.assertRaises(fzd.Error) as cm:
            fzd.decompress(self.c.compress(a, eb=1e-3), local=False, address=NOWHERE)
        self.assertEqual(cm.exception.name, "ECONNREFUSED")
        # The daemon's refusals are raised, not hidden by a local retry.
        with self.assertRaises(fzd.Error) as cm:
            fzd.compress(a, eb=-1, address=self.fzd.address)
        self.assertEqual(cm.exception.name, "EBOUND")
        with self.assertRaises(fzd.Error) as cm:
            fzd.compress(a, eb=-1, local=True)
        self.assertEqual(cm.exception.name, "EBOUND")

    def test_out_is_checked_before_decoding(self):
        a = smooth_field((256, 256), np.float32)
        arc = fzd.compress(a, eb=1e-3, local=True)
        for how in (dict(local=True), dict(local=False, address=self.fzd.address)):
            with self.subTest(**how):
                back = fzd.decompress(arc, **how)
                out = np.empty((256, 256), np.float32)
                self.assertIs(fzd.decompress(arc, out=out, **how), out)
                self.assertEqual(out.tobytes(), back.tobytes())
                flat = np.empty(256 * 256, np.float32)
                fzd.decompress(arc, out=flat, **how)
                self.assertEqual(flat.tobytes(), back.tobytes())
                raw = bytearray(a.nbytes)
                fzd.decompress(arc, out=raw, **how)
                self.assertEqual(bytes(raw), back.tobytes())
                big_endian = np.empty((256, 256), ">f4")
                fzd.decompress(arc, out=big_endian, **how)
                self.assertTrue(np.array_equal(big_endian, back))
                strided = np.empty((256, 512), np.float32)[:, ::2]
                fzd.decompress(arc, out=strided, **how)
                self.assertTrue(np.array_equal(strided, back))
                # Same byte count, another dtype: refused, out untouched.
                wrong = np.full((256, 256), 7, np.int32)
                self.expect("EDTYPE", fzd.decompress, arc, out=wrong, **how)
                self.assertTrue(np.all(wrong == 7))
                self.expect("EDTYPE", fzd.decompress, arc, out=np.empty(128 * 256, np.float64),
                            **how)
                self.expect("ENOSPC", fzd.decompress, arc, out=np.empty(10, np.float32), **how)
                self.expect("ESHAPE", fzd.decompress, arc, out=np.empty(256 * 257, np.float32),
                            **how)
                self.expect("ESHAPE", fzd.decompress, arc, out=np.empty((128, 512), np.float32),
                            **how)
                self.expect("ENOSPC", fzd.decompress, arc, out=bytearray(100), **how)
                self.expect("EINVAL", fzd.decompress, arc, out=b"\0" * a.nbytes, **how)

    def test_a_bomb_is_refused_before_it_decodes(self):
        # 1 GiB of zeros is a small archive; an out of the wrong size must be
        # refused from the header, before a byte is decoded.
        bomb = fzd.compress(np.zeros(1 << 28, np.float32), pipeline="lossless", local=True)
        self.assertLess(len(bomb), 1 << 20)
        for how in (dict(local=True), dict(local=False, address=self.fzd.address)):
            with self.subTest(**how):
                t0 = time.monotonic()
                self.expect("ENOSPC", fzd.decompress, bomb, out=np.empty(1024, np.float32),
                            **how)
                self.expect("EDTYPE", fzd.decompress, bomb, out=np.empty(1 << 28, np.int32),
                            **how)
                self.assertLess(time.monotonic() - t0, 1.0)

    def test_damaged_archives(self):
        arc = fzd.compress(smooth_field((100, 100), np.float32), eb=1e-3, local=True)
        self.expect("EFORMAT", fzd.decompress, b"not an archive at all", local=True)
        self.expect("ETRUNC", fzd.decompress, arc[:len(arc) - 10], local=True)
        bad = bytearray(arc)
        bad[-5] ^= 0x40
        self.expect("ECORRUPT", fzd.decompress, bytes(bad), local=True)
        bad = bytearray(arc)
        bad[9] ^= 1  # inside the header: its CRC-32C disagrees
        self.expect("ECORRUPT", fzd.decompress, bytes(bad), local=True)

    def test_info_refuses_what_the_decoder_refuses(self):
        # A 1-D f32 archive: quant's eb_abs is the double at byte 27.  A
        # negative one (the header's CRC-32C made right again) parses, but
        # the decoder refuses it, and so must info().
        import struct
        arc = bytearray(fzd.compress(np.linspace(0, 1, 20000, dtype=np.float32), eb=1e-3,
                                     local=True))
        h = fzd.info(arc)
        self.assertEqual(struct.unpack_from("<d", arc, 27)[0], h.eb_abs)
        struct.pack_into("<d", arc, 27, -h.eb_abs)
        end = h.header_bytes - 4
        struct.pack_into("<I", arc, end, fzd.crc32c(arc[:end]))
        self.expect("ECORRUPT", fzd.decompress, bytes(arc), local=True)
        self.expect("ECORRUPT", fzd.info, bytes(arc))

    def test_threads(self):
        fields = [smooth_field((128, 100 + i), np.float32, seed=i) for i in range(8)]
        want = [self.c.compress(f, eb=1e-3) for f in fields]
        got = [None] * len(fields)

        def run(i):
            got[i] = fzd.compress(fields[i], eb=1e-3, local=True)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fields))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(got, want)

    def expect(self, name, fn, *args, **kw):
        with self.assertRaises(fzd.Error) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.name, name, str(cm.exception))


FIND = r"""
import fzd
from fzd import _engine
try:
    print("loaded", _engine.library()._name)
except fzd.Error as e:
    print(e.name, e.message)
"""


class LibrarySearch(unittest.TestCase):
    def find(self, **env):
        e = {k: v for k, v in os.environ.items() if k not in ("FZD_ENGINE_LIB",
                                                               "LD_LIBRARY_PATH")}
        e.update(env)
        r = subprocess.run([sys.executable, "-c", FIND], env=e, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def test_order(self):
        lib = os.environ["FZD_ENGINE_LIB"]
        self.assertEqual(self.find(FZD_ENGINE_LIB=lib), "loaded " + lib)
        # The source tree's package holds no library of its own: the
        # system's libfzengine.so.N comes next (here through the loader's
        # path, as an installed one comes through ld.so's).
        major = fzd.__version__.split(".")[0]
        self.assertEqual(self.find(LD_LIBRARY_PATH=os.path.dirname(lib)),
                         "loaded libfzengine.so." + major)
        out = self.find(FZD_ENGINE_LIB="/nonexistent/libfzengine.so")
        self.assertTrue(out.startswith("ENOSYS no fzd engine library"), out)
        self.assertIn("/nonexistent/libfzengine.so", out)
        # Nothing anywhere: unless this machine has an engine installed.
        probe = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL("
                                "'libfzengine.so.%s')" % major], capture_output=True,
                               env={k: v for k, v in os.environ.items()
                                    if k != "LD_LIBRARY_PATH"})
        if probe.returncode != 0:
            out = self.find()
            self.assertTrue(out.startswith("ENOSYS"), out)
            self.assertIn("libfzengine.so." + major, out)


LOOKUP = r"""
import fzd
print(fzd.default_address())
"""


class DefaultSocket(unittest.TestCase):
    def lookup(self, **env):
        e = {k: v for k, v in os.environ.items() if k not in ("FZD_SOCKET", "XDG_RUNTIME_DIR")}
        e.update(env)
        r = subprocess.run([sys.executable, "-c", LOOKUP], env=e, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def test_order(self):
        if os.path.exists("/run/fzd/fzd.sock"):
            self.skipTest("a system fzd's socket exists here, and comes first")
        with tempfile.TemporaryDirectory() as xdg:
            self.assertEqual(self.lookup(FZD_SOCKET="unix:/x.sock", XDG_RUNTIME_DIR=xdg),
                             "unix:/x.sock")
            self.assertEqual(self.lookup(XDG_RUNTIME_DIR=xdg), "/run/fzd/fzd.sock")
            os.mkdir(os.path.join(xdg, "fzd"))
            open(os.path.join(xdg, "fzd", "fzd.sock"), "w").close()
            self.assertEqual(self.lookup(XDG_RUNTIME_DIR=xdg),
                             os.path.join(xdg, "fzd", "fzd.sock"))
            self.assertEqual(self.lookup(), "/run/fzd/fzd.sock")


if __name__ == "__main__":
    fzdtest.main()
