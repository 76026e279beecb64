#!/usr/bin/env python3
"""`fzctl frames` as a user runs it: a real fzd (`fzd --socket PATH`), HDF5
files written by h5py with hdf5plugin's Bitshuffle filter (LZ4 and zstd),
fzctl run as a process, and its output read back with h5py and compared
with numpy's reference: the dataset read densely through h5py and
hdf5plugin, then the cut (and the mask, and top-N).

Usage: test_fzctl_frames.py --fzd FZD --fzctl FZCTL --venv DIR

The virtual environment (numpy, h5py, hdf5plugin from PyPI) is the one
tests/frames/oracle.py makes, made here the same way when it is missing;
the script re-runs itself in it.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frames"))
from oracle import ensure_venv  # noqa: E402

ARGS = None


def want_sparse(frame, cut, mask=None, top_n=0):
    """numpy's reference: (indices, values) of the used pixels above the
    cut in pixel order; with top_n the top_n largest (ties to the lower
    index), still in pixel order."""
    flat = frame.reshape(-1)
    used = flat > cut
    if mask is not None:
        used &= mask.reshape(-1) != 0
    idx = np.flatnonzero(used)
    if top_n and idx.size > top_n:
        order = np.lexsort((idx, -flat[idx].astype(np.float64)))
        idx = np.sort(idx[order[:top_n]])
    return idx, flat[idx]


def stack(n, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    s = rng.poisson(1.2, (n,) + shape).astype(dtype)
    for f in s:
        f.flat[rng.integers(0, f.size, 25)] = rng.integers(40, 120, 25).astype(dtype)
    return s


def write(path, data, cname="lz4", name="entry/data/data", **kw):
    with h5py.File(path, "w", **kw) as h:
        h.create_dataset(name, data=data, chunks=(1,) + data.shape[1:],
                         **hdf5plugin.Bitshuffle(nelems=0, cname=cname))


class FzctlFrames(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fzctl-frames-")
        cls.sock = os.path.join(cls.tmp.name, "fzd.sock")
        cls.log = open(os.path.join(cls.tmp.name, "fzd.log"), "w")
        env = dict(os.environ)
        for k in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "FZD_SOCKET"):
            env.pop(k, None)
        cls.fzd = subprocess.Popen([ARGS.fzd, "--socket", cls.sock], stdout=cls.log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while not os.path.exists(cls.sock):
            if cls.fzd.poll() is not None or time.monotonic() > deadline:
                cls.fzd.kill()
                raise RuntimeError("fzd did not start")
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.fzd.send_signal(signal.SIGTERM)
        code = cls.fzd.wait(timeout=60)
        cls.log.close()
        cls.tmp.cleanup()
        if code != 0:
            raise AssertionError("fzd exited with %d after SIGTERM" % code)

    def path(self, name):
        return os.path.join(self.tmp.name, "%s-%s" % (self._testMethodName, name))

    def fzctl(self, *args):
        env = dict(os.environ, FZD_SOCKET="unix:" + self.sock)
        r = subprocess.run([ARGS.fzctl, "frames", *args], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=300)
        return r.returncode, r.stdout, r.stderr

    def dense_of(self, path, name="entry/data/data"):
        with h5py.File(path, "r") as h:
            return h[name][...]

    def check_sparse(self, out, ref, cut, mask=None, top_n=0, failed=()):
        """The output's lists equal numpy's, frame by frame; failed frames
        are empty with a status."""
        with h5py.File(out, "r") as h:
            g = h["entry/sparse"]
            ptr, index, values = g["frame_ptr"][...], g["index"][...], g["values"][...]
            status, count = g["status"][...], g["count"][...]
            self.assertEqual(ptr.dtype, np.uint64)
            self.assertEqual(index.dtype, np.uint32)
            self.assertEqual(values.dtype, ref.dtype)
            self.assertEqual(tuple(g.attrs["shape"]), ref.shape[1:])
            self.assertEqual(float(g.attrs["cut"]), float(cut))
            self.assertEqual(len(ptr), len(ref) + 1)
            self.assertEqual(ptr[0], 0)
            self.assertEqual(ptr[-1], len(index))
            self.assertEqual(len(values), len(index))
            for i, f in enumerate(ref):
                got_i, got_v = index[ptr[i]:ptr[i + 1]], values[ptr[i]:ptr[i + 1]]
                if i in failed:
                    self.assertNotEqual(status[i], 0, "frame %d" % i)
                    self.assertEqual(len(got_i), 0)
                    continue
                self.assertEqual(status[i], 0, "frame %d" % i)
                idx, val = want_sparse(f, cut, mask, top_n)
                np.testing.assert_array_equal(got_i, idx, "frame %d" % i)
                np.testing.assert_array_equal(got_v, val, "frame %d" % i)
                full, _ = want_sparse(f, cut, mask)
                self.assertEqual(count[i], full.size)
            return dict(g.attrs)

    def test_lz4_and_zstd_odd_sizes_every_dtype(self):
        cases = [("lz4", np.uint16, (37, 53)), ("zstd", np.uint16, (61, 29)),
                 ("lz4", np.int32, (13, 101)), ("zstd", np.uint8, (1, 333)),
                 ("lz4", np.uint32, (45, 45))]
        for n, (cname, dtype, shape) in enumerate(cases):
            with self.subTest(codec=cname, dtype=np.dtype(dtype).name, shape=shape):
                src, out = self.path("%d.h5" % n), self.path("%d-out.h5" % n)
                data = stack(6, shape, dtype, n)
                write(src, data, cname)
                ref = self.dense_of(src)  # h5py + hdf5plugin decode the file
                np.testing.assert_array_equal(ref, data)
                rc, so, se = self.fzctl("--cut", "3", src + ":/entry/data/data", out)
                self.assertEqual(rc, 0, se)
                self.assertIn("6 frames", so)
                # A new file's mode under the umask, as any program writes it.
                umask = os.umask(0)
                os.umask(umask)
                self.assertEqual(os.stat(out).st_mode & 0o777, 0o666 & ~umask)
                self.assertIn("read by fzd from the file", so)
                attrs = self.check_sparse(out, ref, 3)
                self.assertEqual(attrs["codec"], cname)
                self.assertEqual(attrs["source_dataset"], "/entry/data/data")
                self.assertEqual(attrs["source_file"], src)
                np.testing.assert_array_equal(attrs["frames"], [0, 6])

    def test_batches_range_inline_and_user_block(self):
        src = self.path("in.h5")
        data = stack(11, (40, 24), np.uint16, 7)
        write(src, data, "lz4", userblock_size=1024)
        ref = self.dense_of(src)
        outs = []
        for extra in (["--batch", "3"], ["--batch", "3", "--inline"]):
            out = self.path("out%d.h5" % len(outs))
            rc, so, se = self.fzctl("--cut", "2", "--frames", "2:9", *extra,
                                    src + ":/entry/data/data", out)
            self.assertEqual(rc, 0, se)
            self.assertIn("7 frames", so)
            self.assertIn("inline" if "--inline" in extra else "read by fzd", so)
            attrs = self.check_sparse(out, ref[2:9], 2)
            np.testing.assert_array_equal(attrs["frames"], [2, 9])
            outs.append(out)
        # A range past the end stops at the end.
        rc, so, se = self.fzctl("--frames", "8:", "-f", src + ":/entry/data/data", outs[0])
        self.assertEqual(rc, 0, se)
        self.check_sparse(outs[0], ref[8:], 0)
        rc, so, se = self.fzctl("--frames", "11:", "-f", src + ":/entry/data/data", outs[0])
        self.assertEqual(rc, 2)
        self.assertIn("has 11 frames", se)

    def test_mask_npy_and_h5_and_top(self):
        src, maskfile = self.path("in.h5"), self.path("mask.h5")
        data = stack(5, (33, 47), np.uint16, 11)
        write(src, data, "zstd")
        ref = self.dense_of(src)
        rng = np.random.default_rng(3)
        mask = (rng.random((33, 47)) > 0.3).astype(np.uint8)
        np.save(self.path("mask.npy"), mask)
        np.save(self.path("bools.npy"), mask.astype(bool))
        with h5py.File(maskfile, "w") as h:
            h["m/used"] = mask.astype(np.int16) * -3  # any nonzero integer: used
            h["m/bools"] = mask.astype(bool)
        for n, spec in enumerate((self.path("mask.npy"), self.path("bools.npy"),
                                  maskfile + ":/m/used", maskfile + ":/m/bools")):
            for top in (0, 4):
                with self.subTest(mask=spec, top=top):
                    out = self.path("out-%d-%d.h5" % (n, top))
                    args = ["--cut", "1", "--mask", spec, src + ":/entry/data/data", out]
                    if top:
                        args[:0] = ["--top", str(top)]
                    rc, so, se = self.fzctl(*args)
                    self.assertEqual(rc, 0, se)
                    attrs = self.check_sparse(out, ref, 1, mask=mask, top_n=top)
                    self.assertEqual(attrs["mask"], spec)
                    self.assertEqual(int(attrs["top_n"]), top)
        # A mask of another size is refused, naming the frame's.
        np.save(self.path("small.npy"), mask[:10])
        rc, so, se = self.fzctl("--mask", self.path("small.npy"), src + ":/entry/data/data",
                                self.path("never.h5"))
        self.assertEqual(rc, 2)
        self.assertIn("is not 33 x 47 integers", se)
        self.assertFalse(os.path.exists(self.path("never.h5")))

    def test_dense(self):
        src, out = self.path("in.h5"), self.path("out.h5")
        data = stack(4, (19, 77), np.int16, 5)
        write(src, data, "lz4")
        rc, so, se = self.fzctl("--dense", src + ":/entry/data/data", out)
        self.assertEqual(rc, 0, se)
        with h5py.File(out, "r") as h:
            d = h["entry/data/data"]
            self.assertEqual(d.chunks, (1, 19, 77))
            np.testing.assert_array_equal(d[...], self.dense_of(src))
            np.testing.assert_array_equal(h["entry/data/status"][...], 0)
        rc, so, se = self.fzctl("--dense", "--cut", "3", src + ":/entry/data/data", out)
        self.assertEqual(rc, 1)
        self.assertIn("takes no --cut", se)

    def test_corrupt_chunk_fails_its_frame_only(self):
        src, out = self.path("in.h5"), self.path("out.h5")
        data = stack(6, (50, 50), np.uint16, 13)
        write(src, data, "lz4")
        ref = self.dense_of(src)
        with h5py.File(src, "r") as h:
            info = h["entry/data/data"].id.get_chunk_info_by_coord((3, 0, 0))
        with open(src, "r+b") as f:
            # Frame 3's first block claims more bytes than its chunk has.
            f.seek(info.byte_offset + 12)
            f.write(b"\x7f\xff\x00\x00")
        for extra in ([], ["--inline"]):
            rc, so, se = self.fzctl("--cut", "2", "-f", "--batch", "4", *extra,
                                    src + ":/entry/data/data", out)
            self.assertEqual(rc, 2, se)
            self.assertIn("frame 3:", se)
            self.assertIn("1 failed", so)
            self.assertNotIn("frame 2:", se)
            self.check_sparse(out, ref, 2, failed=(3,))

    def test_skipped_filter_and_unwritten_chunks(self):
        # A chunk the filter skipped holds the pixels as they are, and an
        # unwritten chunk is the fill value: neither is a bitshuffle chunk,
        # and both go inline, encoded by fzctl.
        src, out = self.path("in.h5"), self.path("out.h5")
        data = stack(5, (21, 30), np.uint16, 17)
        with h5py.File(src, "w") as h:
            ds = h.create_dataset("d", shape=data.shape, dtype=np.uint16, chunks=(1, 21, 30),
                                  fillvalue=9, **hdf5plugin.Bitshuffle(cname="lz4"))
            for i in (0, 2, 4):
                ds[i] = data[i]
            ds.id.write_direct_chunk((1, 0, 0), data[1].tobytes(), filter_mask=1)
        ref = self.dense_of(src, "d")
        np.testing.assert_array_equal(ref[1], data[1])
        np.testing.assert_array_equal(ref[3], 9)
        rc, so, se = self.fzctl("--cut", "2", src + ":/d", out)
        self.assertEqual(rc, 0, se)
        self.check_sparse(out, ref, 2)

    def test_refusals(self):
        src = self.path("in.h5")
        data = stack(2, (8, 8), np.uint16, 1)
        with h5py.File(src, "w") as h:
            h.create_dataset("gz", data=data, chunks=(1, 8, 8), compression="gzip")
            h.create_dataset("flat", data=data[0], chunks=(8, 8),
                             **hdf5plugin.Bitshuffle(cname="lz4"))
            h.create_dataset("two", data=data, chunks=(2, 8, 8),
                             **hdf5plugin.Bitshuffle(cname="lz4"))
            h.create_dataset("raw", data=data, chunks=(1, 8, 8), **hdf5plugin.Bitshuffle(cname="none"))
            h.create_group("grp")
        out = self.path("out.h5")
        cases = [(":/gz", "not bitshuffle chunks"), (":/gz", "deflate"),
                 (":/flat", "3 dimensions"), (":/two", "one frame a chunk"),
                 (":/raw", "uncompressed"), (":/missing/data", "has no dataset '/missing/data'"),
                 (":/grp", "is not a dataset")]
        for spec, words in cases:
            with self.subTest(spec=spec):
                rc, so, se = self.fzctl(src + spec, out)
                self.assertEqual(rc, 2, se)
                self.assertIn(words, se)
                self.assertFalse(os.path.exists(out))
        rc, so, se = self.fzctl(self.path("nope.h5") + ":/d", out)
        self.assertEqual(rc, 2)
        self.assertIn("No such file", se)
        rc, so, se = self.fzctl(src, out)
        self.assertEqual(rc, 1)
        self.assertIn("names no dataset", se)
        # Usage errors are 1, refused files 2, as for fzctl submit.
        # The output is never the input, and an existing output needs -f.
        write(self.path("ok.h5"), data)
        rc, so, se = self.fzctl(self.path("ok.h5") + ":/entry/data/data", self.path("ok.h5"))
        self.assertEqual(rc, 2)
        self.assertIn("is the input", se)
        rc, so, se = self.fzctl(self.path("ok.h5") + ":/entry/data/data", src)
        self.assertEqual(rc, 2)
        self.assertIn("exists (use -f", se)


class FzctlFramesTcp(unittest.TestCase):
    """Over TCP no descriptor travels: every chunk goes inline, and the
    lists are the same."""

    @classmethod
    def setUpClass(cls):
        import json
        import socket
        cls.tmp = tempfile.TemporaryDirectory(prefix="fzctl-frames-tcp-")
        with socket.socket() as probe:  # a free port of the loopback
            probe.bind(("127.0.0.1", 0))
            cls.port = probe.getsockname()[1]
        cfg = os.path.join(cls.tmp.name, "fzd.json")
        with open(cfg, "w") as f:
            json.dump({"socket_path": os.path.join(cls.tmp.name, "fzd.sock"),
                       "tcp_enabled": True, "tcp_port": cls.port, "tcp_token": "t0ken"}, f)
        cls.log = open(os.path.join(cls.tmp.name, "fzd.log"), "w")
        env = dict(os.environ)
        for k in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "FZD_SOCKET"):
            env.pop(k, None)
        cls.fzd = subprocess.Popen([ARGS.fzd, "--config", cfg], stdout=cls.log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", cls.port), timeout=1).close()
                break
            except OSError:
                if cls.fzd.poll() is not None or time.monotonic() > deadline:
                    cls.fzd.kill()
                    raise RuntimeError("fzd did not start")
                time.sleep(0.05)

    tearDownClass = FzctlFrames.tearDownClass

    def test_tcp_inline(self):
        src, out = os.path.join(self.tmp.name, "in.h5"), os.path.join(self.tmp.name, "out.h5")
        data = stack(9, (31, 43), np.uint16, 23)
        write(src, data, "zstd")
        r = subprocess.run([ARGS.fzctl, "-S", "tcp:127.0.0.1:%d" % self.port, "--token",
                            "t0ken", "frames", "--cut", "2", "--batch", "4",
                            src + ":/entry/data/data", out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("chunks sent inline", r.stdout)
        FzctlFrames.check_sparse(self, out, data, 2)


def main():
    global ARGS, np, h5py, hdf5plugin
    ap = argparse.ArgumentParser()
    ap.add_argument("--fzd", required=True)
    ap.add_argument("--fzctl", required=True)
    ap.add_argument("--venv", required=True)
    ARGS, rest = ap.parse_known_args()
    ensure_venv(os.path.abspath(ARGS.venv))
    import numpy as np
    import h5py
    import hdf5plugin
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
