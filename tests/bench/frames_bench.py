#!/usr/bin/env python3
"""Detector frames on the CPU: fzd against bslz4-to-sparse and bitshuffle.

Usage: frames_bench.py --bench BUILD/tests/bench/fz_frames_bench
                       [--venv DIR] [--frames 32] [--cut 10] [--repeat 3]

Makes synthetic Eiger 4M frames (2162 x 2068 u16: Poisson background and
200 Bragg peaks a frame), encodes them with the bitshuffle package (LZ4,
default blocks, each chunk with the 12-byte header of HDF5 filter 32008),
then times on the same frames in the same run, one core each:
bitshuffle's decompress_lz4 (dense), bslz4-to-sparse's chunk2sparse (the
pixels above the cut), and fzd's dense and sparse decoders; and fzd's
sparse batch on every core.  Prints a Markdown table.  The packages come
from PyPI into the virtual environment DIR (created once, then reused).
"""
import argparse
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time

PACKAGES = ["numpy", "bitshuffle", "bslz4-to-sparse"]
NI, NJ = 2162, 2068


def ensure_venv(venv):
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
    # One core for the packages: no OpenMP threads behind their calls.
    os.environ["OMP_NUM_THREADS"] = "1"
    os.execv(py, [py, *sys.argv])


def make_frame(rng, np):
    frame = rng.poisson(0.3, (NI, NJ)).astype(np.float64)
    y, x = np.mgrid[-4:5, -4:5]
    for _ in range(200):
        ci, cj = rng.integers(4, NI - 4), rng.integers(4, NJ - 4)
        amp, sig = rng.uniform(30, 1000), rng.uniform(0.7, 1.4)
        frame[ci - 4:ci + 5, cj - 4:cj + 5] += rng.poisson(amp * np.exp(-(x * x + y * y) / (2 * sig * sig)))
    return np.minimum(frame, 65535).astype(np.uint16)


def best_of(repeat, fn):
    best = 1e30
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="the fz_frames_bench program")
    ap.add_argument("--venv", default="build-frames-bench-venv")
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--cut", type=float, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    ensure_venv(os.path.abspath(a.venv))
    import numpy as np
    import bitshuffle
    import bslz4_to_sparse

    rng = np.random.default_rng(4)
    frames = [make_frame(rng, np) for _ in range(a.frames)]
    chunks = []
    for fr in frames:
        body = bitshuffle.compress_lz4(fr.ravel(), 0).tobytes()
        chunks.append(struct.pack(">QI", fr.nbytes, 4096 * 2) + body)
    raw = sum(fr.nbytes for fr in frames)
    ratio = raw / sum(len(c) for c in chunks)
    mask = np.ones((NI, NJ), np.uint8)
    c2s = bslz4_to_sparse.chunk2sparse(mask, np.dtype(np.uint16))
    listed = sum(c2s(c, a.cut)[0] for c in chunks)
    bodies = [np.frombuffer(c, np.uint8, offset=12) for c in chunks]

    def dense():
        for b in bodies:
            bitshuffle.decompress_lz4(b, (NI, NJ), np.dtype(np.uint16), 4096)

    def sparse():
        for c in chunks:
            c2s(c, a.cut)

    rows = [("bitshuffle %s `decompress_lz4`, dense, 1 core" % bitshuffle.__version__,
             best_of(a.repeat, dense), 0),
            ("bslz4-to-sparse %s `chunk2sparse`, cut %g, 1 core" % (bslz4_to_sparse.version, a.cut),
             best_of(a.repeat, sparse), listed)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "chunks.bin")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(chunks)))
            f.write(b"".join(struct.pack("<Q", len(c)) for c in chunks))
            f.write(b"".join(chunks))
        out = subprocess.run([a.bench, "-r", str(a.repeat), "-c", repr(a.cut), path,
                              str(NI), str(NJ)], check=True, capture_output=True, text=True).stdout
    ncpu = os.cpu_count()
    names = {"fzd_dense_1core": "fzd CPU, dense, 1 core",
             "fzd_sparse_1core": "fzd CPU, cut %g, 1 core" % a.cut,
             "fzd_sparse_batch": "fzd CPU, cut %g, batch on %d cores" % (a.cut, ncpu)}
    for line in out.strip().split("\n"):
        name, fps, _, n = line.split()
        if int(n) and int(n) != listed:
            sys.exit("fzd listed %s pixels, chunk2sparse %d" % (n, listed))
        rows.append((names[name], a.frames / float(fps), int(n)))
    print("%d synthetic Eiger 4M frames (%dx%d u16, 200 peaks), bitshuffle-LZ4 ratio %.1f, "
          "%.0f pixels a frame above the cut; %s, %d CPUs"
          % (a.frames, NI, NJ, ratio, listed / a.frames, platform.processor() or platform.machine(),
             ncpu))
    print()
    print("| decoder | frames/s | GB/s of pixels |")
    print("|---|---|---|")
    for name, t, _ in rows:
        print("| %s | %.0f | %.2f |" % (name, a.frames / t, raw / t / 1e9))


if __name__ == "__main__":
    main()
