#!/usr/bin/env python3
"""fzd.numcodecs.FZD against a real fzd: the codec alone (config round trip,
registry lookup by id, encode/decode, the same archive with and without a
daemon, FZD() with its defaults, out checked before decoding), and zarr
arrays (Debian's zarr 2.13) written with compressor=FZD and read back,
every chunk's error within the bound its own archive's header states,
lossless bit for bit; a store written through fzd is read by a fresh
process with no daemon (FZD_SOCKET pointing nowhere), every value within
1.0x the bound (ABS; REL with the array's fill value given, over edge
chunks).  The field is a smooth synthetic one, and also the NCAR Trinidad
topography grid when tests/data/ncar_field.py can read it (netCDF4 and
libncarg-data present)."""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import fzdtest
from fzdtest import smooth_field

try:
    import numcodecs
    import zarr
except ImportError as e:
    sys.exit("FAIL: %s (install python3-zarr and python3-numcodecs)" % e)

import fzd
from fzd.numcodecs import FZD


def real_field():
    """The Trinidad topography grid, or None where it cannot be read here."""
    script = os.path.join(os.environ["FZD_SOURCE_DIR"], "tests", "data", "ncar_field.py")
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, script, tmp], capture_output=True, text=True)
        if r.returncode != 0:
            return None
        path = r.stdout.strip()
        dims = tuple(int(d) for d in path.rsplit("_", 1)[1][:-4].split("x"))
        return np.fromfile(path, dtype="<f4").reshape(dims)


class Codec(fzdtest.DaemonTest):
    def test_config_and_registry(self):
        c = FZD(pipeline="fast", eb=1e-2, mode="abs", fill_value=-9999, address=self.fzd.address)
        cfg = c.get_config()
        self.assertEqual(cfg, {"id": "fzd", "pipeline": "fast", "eb": 0.01, "mode": "abs",
                               "fill_value": -9999.0, "address": self.fzd.address})
        c2 = numcodecs.get_codec(cfg)  # found by id: registered on import
        self.assertIsInstance(c2, FZD)
        self.assertEqual(c2, c)
        import pickle
        self.assertEqual(pickle.loads(pickle.dumps(c)), c)

    def test_encode_decode(self):
        c = FZD(eb=1e-3, address=self.fzd.address)
        a = smooth_field((120, 80), np.float32)
        arc = c.encode(a)
        h = fzd.info(arc)
        self.assertEqual((h.dtype, h.shape), ("f32", (120, 80)))
        back = c.decode(arc)
        self.assertLessEqual(np.abs(back - a).max(), h.eb_abs)
        out = np.empty_like(a)
        c.decode(arc, out=out)
        self.assertTrue(np.array_equal(out, back))
        raw = b"bytes from an earlier filter " * 100
        self.assertEqual(FZD(pipeline="lossless", address=self.fzd.address)
                         .decode(FZD(pipeline="lossless", address=self.fzd.address).encode(raw))
                         .tobytes(), raw)

    def test_threads_share_a_codec(self):
        from concurrent.futures import ThreadPoolExecutor
        c = FZD(eb=1e-3, address=self.fzd.address)
        fields = [smooth_field((64, 64 + i), np.float32, seed=i) for i in range(16)]
        with ThreadPoolExecutor(4) as ex:
            backs = list(ex.map(lambda f: c.decode(c.encode(f)), fields))
        for f, b in zip(fields, backs):
            self.assertEqual(b.shape, f.shape)
            self.assertLessEqual(np.abs(b - f).max(), fzd.info(c.encode(f)).eb_abs)

    def test_no_daemon_same_archive(self):
        a = smooth_field((90, 110), np.float32)
        nowhere = FZD(eb=1e-3, address="unix:" + self.fzd.socket + ".absent")
        daemon = FZD(eb=1e-3, address=self.fzd.address)
        with fzd.Client(self.fzd.address) as c:
            before = c.stats()["compress"]["count"]
            arc = daemon.encode(a)
            self.assertEqual(c.stats()["compress"]["count"], before + 1)
            self.assertEqual(nowhere.encode(a), arc)  # in process: the same bytes
            self.assertEqual(c.stats()["compress"]["count"], before + 1)
            # Decoding never asks the daemon.
            before = c.stats()["decompress"]["count"]
            self.assertEqual(daemon.decode(arc).tobytes(), nowhere.decode(arc).tobytes())
            self.assertEqual(c.stats()["decompress"]["count"], before)

    def test_defaults_encode(self):
        c = FZD()
        self.assertEqual((c.pipeline, c.eb, c.mode), (None, 1e-4, "rel"))
        a = smooth_field((100, 100), np.float32)
        h = fzd.info(c.encode(a))
        self.assertEqual(h.mode, "rel")
        self.assertLessEqual(np.abs(c.decode(c.encode(a)) - a).max(), h.eb_abs)
        ints = np.arange(5000, dtype=np.int16)
        arc = c.encode(ints)
        self.assertEqual(fzd.info(arc).eb_abs, 0)  # integers: lossless
        self.assertTrue(np.array_equal(c.decode(arc), ints))

    def test_decode_checks_out(self):
        c = FZD(eb=1e-3)
        a = smooth_field((64, 64), np.float32)
        arc = c.encode(a)
        wrong = np.zeros((64, 64), np.int32)  # same byte count
        with self.assertRaises(fzd.Error) as cm:
            c.decode(arc, out=wrong)
        self.assertEqual(cm.exception.name, "EDTYPE")
        self.assertFalse(wrong.any())
        with self.assertRaises(fzd.Error) as cm:
            c.decode(arc, out=np.zeros(100, np.float32))
        self.assertEqual(cm.exception.name, "ENOSPC")
        out = np.empty((64, 64), np.float32)
        self.assertIs(c.decode(arc, out=out), out)
        self.assertLessEqual(np.abs(out - a).max(), fzd.info(arc).eb_abs)


class Zarr(fzdtest.DaemonTest):
    def roundtrip(self, field, chunks, **codec):
        comp = FZD(address=self.fzd.address, **codec)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.zarr")
            z = zarr.open(path, mode="w", shape=field.shape, chunks=chunks,
                          dtype=field.dtype, compressor=comp)
            z[...] = field
            # Read through a fresh open: the codec comes from .zarray's config.
            z2 = zarr.open(path, mode="r")
            self.assertIsInstance(z2.compressor, FZD)
            self.assertEqual(z2.compressor.get_config(), comp.get_config())
            back = z2[...]
            self.assertEqual(back.dtype, field.dtype)
            self.assertEqual(back.shape, field.shape)
            # Every chunk is an fzd archive; each one's bound holds on its cells.
            store = z2.store
            keys = [k for k in store.keys() if not k.startswith(".z")]
            self.assertEqual(len(keys), int(np.prod(z2.cdata_shape)))
            worst = 0.0
            for k in keys:
                h = fzd.info(store[k])
                idx = tuple(int(i) for i in k.split("."))
                sl = tuple(slice(i * c, min((i + 1) * c, n))
                           for i, c, n in zip(idx, chunks, field.shape))
                if h.eb_abs == 0:  # lossless: bit for bit, NaN included
                    self.assertEqual(back[sl].tobytes(), field[sl].tobytes(), "chunk %s" % k)
                    continue
                err = np.abs(back[sl].astype(np.float64) - field[sl].astype(np.float64)).max()
                self.assertLessEqual(err, h.eb_abs, "chunk %s" % k)
                worst = max(worst, err)
            return back, worst, keys

    def test_smooth_field(self):
        f = smooth_field((500, 700), np.float32)
        back, worst, keys = self.roundtrip(f, (128, 256), pipeline="balanced", eb=1e-3, mode="rel")
        self.assertGreater(worst, 0)  # lossy
        self.assertEqual(len(keys), 4 * 3)
        f64 = smooth_field((40, 50, 60), np.float64)
        self.roundtrip(f64, (16, 25, 60), pipeline="fast", eb=1e-5, mode="abs")

    def test_lossless_is_bit_exact(self):
        f = smooth_field((300, 301), np.float32)
        f[5, 5] = np.nan
        back, worst, _ = self.roundtrip(f, (100, 100), pipeline="lossless")
        self.assertEqual(back.tobytes(), f.tobytes())
        ints = (np.arange(100000, dtype=np.int32) % 977).reshape(250, 400)
        back, _, _ = self.roundtrip(ints, (64, 64), pipeline="lossless")
        self.assertTrue(np.array_equal(back, ints))

    def test_real_field(self):
        f = real_field()
        if f is None:
            self.skipTest("tests/data/ncar_field.py cannot read the NCAR field here")
        self.roundtrip(f, tuple(max(1, n // 2) for n in f.shape), eb=1e-4, mode="rel")


READ = r"""
import json, sys
import numpy as np
import zarr
import fzd.numcodecs  # registers the codec: the source tree has no entry point

out = sys.argv[1]
res = {}
for name in ("abs", "rel", "ints"):
    z = zarr.open(out + "/%s.zarr" % name, mode="r")
    a = np.load(out + "/%s.npy" % name)
    back = z[...]
    res[name] = {"max_error": float(np.abs(back.astype(np.float64) - a).max()),
                 "range": float(a.max()) - float(a.min()),
                 "exact": back.tobytes() == a.tobytes(), "codec": z.compressor.get_config()}
print(json.dumps(res))
"""


class FreshReader(unittest.TestCase):
    def test_store_reads_without_a_daemon(self):
        import json
        y, x = np.mgrid[0:500, 0:700].astype(np.float32)
        field = (np.sin(x / 40) * np.cos(y / 30) * 50 + 100 + y / 10).astype(np.float32)
        ints = (np.arange(210000, dtype=np.int32) * 7919 % 100003).reshape(300, 700)
        with tempfile.TemporaryDirectory(prefix="fzd-zarr2-") as tmp:
            daemon = fzdtest.Daemon()
            try:
                with fzd.Client(daemon.address) as c:
                    before = c.stats()["compress"]["count"]
                    chunks = 0
                    # zarr pads edge chunks with the array's fill value (0
                    # here); given to the codec, it stays out of REL's range.
                    for name, a, comp in (
                            ("abs", field, FZD(eb=0.01, mode="abs", address=daemon.address)),
                            ("rel", field, FZD(eb=1e-3, mode="rel", fill_value=0,
                                               address=daemon.address)),
                            ("ints", ints, FZD(address=daemon.address))):
                        z = zarr.open(os.path.join(tmp, name + ".zarr"), mode="w", shape=a.shape,
                                      chunks=(128, 256), dtype=a.dtype, compressor=comp,
                                      fill_value=0)
                        z[...] = a
                        chunks += z.nchunks
                        np.save(os.path.join(tmp, name + ".npy"), a)
                    self.assertEqual(c.stats()["compress"]["count"] - before, chunks)
            finally:
                daemon.stop()
            env = {k: v for k, v in os.environ.items() if k != "FZD_SOCKET"}
            env["FZD_SOCKET"] = "unix:/nonexistent/fzd.sock"
            r = subprocess.run([sys.executable, "-c", READ, tmp], env=env, capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            res = json.loads(r.stdout)
        self.assertLessEqual(res["abs"]["max_error"], 0.01)
        self.assertGreater(res["abs"]["max_error"], 0)
        self.assertLessEqual(res["rel"]["max_error"], 1e-3 * res["rel"]["range"])
        self.assertTrue(res["ints"]["exact"])
        self.assertEqual(res["ints"]["codec"]["pipeline"], None)


if __name__ == "__main__":
    fzdtest.main()
