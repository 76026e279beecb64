#!/usr/bin/env python3
"""hdf5_bench.py - writing a dataset through the fzd HDF5 filter against
fzctl compressing the same bytes, both through one fzd on the CPU backend.
Not run by ctest.

    /usr/bin/python3 tests/bench/hdf5_bench.py BUILD_DIR [--mib 1024]
        [--chunk-mib 4] [--pipeline balanced] [--eb 1e-3] [--mode rel]
        [--repeat 3]

fzctl: `fzctl submit` of the raw file (the daemon reads it through the
descriptor fzctl passes, and writes the archive to a file).  h5py: the
array, already in memory, written to a new file as one chunked dataset with
the filter (FZD_HDF5_DAEMON=require, so every chunk goes to the daemon),
timed up to the file's close; then the same with the embedded engine
(FZD_HDF5_DAEMON=off).  Both write their output to $TMPDIR.  The three are
run in turn --repeat times (a shared machine's load changes from second to
second); the best of each counts, and the run-by-run shares are printed.  Prints MB/s (10^6 bytes of input per second) and the
filter's share of fzctl's throughput.
"""
import argparse
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time


def field(np, rows, cols):
    """A smooth float32 field with a little noise, built row block by block
    (the temporaries of one expression over 1 GiB would need several)."""
    x = np.empty((rows, cols), np.float32)
    j = np.arange(cols, dtype=np.float32)
    rng = np.random.default_rng(1)
    for r0 in range(0, rows, 1024):
        i = np.arange(r0, min(rows, r0 + 1024), dtype=np.float32)[:, None]
        x[r0:r0 + len(i)] = (np.sin(i * 0.002) * np.cos(j * 0.003) * 100.0 +
                             rng.normal(0, 0.01, (len(i), cols)).astype(np.float32))
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--chunk-mib", type=int, default=4)
    ap.add_argument("--pipeline", default="balanced", choices=["balanced", "fast", "lossless"])
    ap.add_argument("--eb", type=float, default=1e-3)
    ap.add_argument("--mode", default="rel", choices=["abs", "rel", "pwrel"])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    fzd = os.environ.get("FZD_BINARY") or os.path.join(a.build, "daemon", "fzd")
    fzctl = os.path.join(a.build, "client", "fzctl")
    plugin = os.path.join(a.build, "client", "hdf5", "plugin")
    cols = 4096
    rows = a.mib * 1024 * 1024 // 4 // cols
    chunk_rows = max(1, a.chunk_mib * 1024 * 1024 // 4 // cols)
    work = tempfile.mkdtemp(prefix="fzd-hdf5-bench-")
    sock = os.path.join(work, "fzd.sock")
    os.environ.update(HDF5_PLUGIN_PATH=plugin, FZD_SOCKET="unix:" + sock)
    import h5py
    import numpy as np

    proc = None
    try:
        x = field(np, rows, cols)
        raw = os.path.join(work, "x.f32")
        x.tofile(raw)
        with open(os.path.join(work, "fzd.json"), "w") as f:
            f.write('{"socket_path": "%s", "backend": "cpu", "log_level": "warning"}\n' % sock)
        proc = subprocess.Popen([fzd, "--config", os.path.join(work, "fzd.json")],
                                stdin=subprocess.DEVNULL)
        for _ in range(300):
            if subprocess.run([fzctl, "-S", sock, "ping", "-c", "1"], capture_output=True
                              ).returncode == 0:
                break
            time.sleep(0.1)
        else:
            sys.exit("fzd did not come up")

        mb = x.nbytes / 1e6
        cmd = [fzctl, "-S", sock, "submit", "-q", "-f", "-t", "f32", "-s", "%dx%d" % (rows, cols),
               "-p", a.pipeline, "-e", repr(a.eb), "-m", a.mode, "-o",
               os.path.join(work, "x.fz"), raw]
        pipe = {"balanced": 0, "fast": 1, "lossless": 2}[a.pipeline]
        mode = {"abs": 0, "rel": 1, "pwrel": 2}[a.mode]
        lo, hi = struct.unpack("<II", struct.pack("<d", a.eb))
        h5 = os.path.join(work, "x.h5")

        def write(daemon):
            os.environ["FZD_HDF5_DAEMON"] = daemon
            with h5py.File(h5, "w") as f:
                f.create_dataset("x", data=x, chunks=(chunk_rows, cols), compression=62160,
                                 compression_opts=(pipe, mode, lo, hi))

        # Interleaved, so that a change of the machine's load between runs
        # reaches all three alike; each run's fzctl and filter times pair up.
        ctl, via, local = [], [], []
        for _ in range(a.repeat):
            ctl.append(timed(lambda: subprocess.run(cmd, check=True)))
            via.append(timed(lambda: write("require")))
            local.append(timed(lambda: write("off")))
        best_ctl, best_h5, best_local = min(ctl), min(via), min(local)
        arc = os.path.getsize(os.path.join(work, "x.fz"))
        h5_size = os.path.getsize(h5)
        shares = sorted(c / v for c, v in zip(ctl, via))

        print("data: %d x %d float32 (%.0f MiB), %s %s %g, HDF5 chunks %d x %d (%.1f MiB)" %
              (rows, cols, x.nbytes / 2**20, a.pipeline, a.mode, a.eb, chunk_rows, cols,
               chunk_rows * cols * 4 / 2**20))
        print("fzctl submit:            %7.1f MB/s  (%.2f s, archive %d bytes)" %
              (mb / best_ctl, best_ctl, arc))
        print("h5py + filter via fzd:   %7.1f MB/s  (%.2f s, file %d bytes)  %.0f%% of fzctl" %
              (mb / best_h5, best_h5, h5_size, 100.0 * best_ctl / best_h5))
        print("h5py + filter in process:%7.1f MB/s  (%.2f s)" % (mb / best_local, best_local))
        print("filter via fzd / fzctl, run by run: %s (median %.0f%%)" %
              (" ".join("%.0f%%" % (100 * r) for r in shares), 100 * shares[len(shares) // 2]))
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
