#!/usr/bin/python3
"""python_bench.py - compression throughput from Python (the fzd package)
against fzctl's, on the same data and the same running fzd.  Not run by
ctest.

    tests/bench/python_bench.py [--build BUILD_DIR] [--mib 1024] [--eb 1e-4]
                                [--mode rel] [--pipeline balanced] [--repeat 5]
                                [--backend cpu] [--workers 1]

Starts one fzd from the build (a private socket), makes one smooth float32
field of MIB MiB (4096 columns), writes it to a file on $TMPDIR for fzctl
(read by fzd through the descriptor fzctl passes, as fzctl always does) and
keeps it in memory for Python, and then times, alternating, `fzctl submit`
of the file (wall time of the process, to the renamed .fz output) and
`fzd.Client.compress(array)` (wall time of the call, to the archive in a
bytes object), and the same call on a copy of the array in a shared
buffer of the client's (Client.empty: no copy per job).  The archives must
be identical.  Prints the best and
median of each and the ratio of the medians; the bar of issue 14 is
Python >= 90% of fzctl.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import fzd  # noqa: E402
import fzdtest  # noqa: E402


def field(mib):
    n = mib * 262144
    cols = 4096
    rows = n // cols
    y = np.arange(rows, dtype=np.float32)[:, None]
    x = np.arange(cols, dtype=np.float32)[None, :]
    f = np.empty((rows, cols), dtype=np.float32)
    np.multiply(np.sin(x * np.float32(0.002)), np.cos(y * np.float32(0.003)), out=f)
    f *= np.float32(50)
    f += y * np.float32(1e-3)
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-cpu"))
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--eb", type=float, default=1e-4)
    ap.add_argument("--mode", default="rel")
    ap.add_argument("--pipeline", default="balanced")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    fzctl = os.path.join(args.build, "client", "fzctl")
    os.environ["FZD_PATH"] = os.path.join(args.build, "daemon", "fzd")
    if not os.access(fzctl, os.X_OK) or not os.access(os.environ["FZD_PATH"], os.X_OK):
        sys.exit("no fzd or fzctl under %s" % args.build)

    a = field(args.mib)
    # One worker: with two, jobs alternate between the workers, each on a
    # core of its own, and the alternating order of the runs would give
    # every fzctl run one core and every Python run the other (on a shared
    # machine one core may be much busier than the other).
    daemon = fzdtest.Daemon(backend=args.backend, log_level="warning", workers=args.workers)
    try:
        with tempfile.TemporaryDirectory(prefix="fzd-pybench-") as tmp:
            path = os.path.join(tmp, "f.f32")
            a.tofile(path)
            out = path + ".fz"
            cmd = [fzctl, "-S", daemon.address, "submit", "-q", "-f", "-t", "f32",
                   "-s", "%dx%d" % a.shape, "-p", args.pipeline, "-e", repr(args.eb),
                   "-m", args.mode, "-o", out, path]
            c = fzd.Client(daemon.address)
            kw = dict(pipeline=args.pipeline, eb=args.eb, mode=args.mode)
            arc = c.compress(a, **kw)  # warm: the client's memfd, the plan
            subprocess.run(cmd, check=True)
            with open(out, "rb") as f:
                if f.read() != arc:
                    sys.exit("FAIL: fzctl's archive and Python's differ")
            shared = c.empty(a.shape, a.dtype)  # Client.empty: no copy per job
            shared[...] = a
            if c.compress(shared, **kw) != arc:
                sys.exit("FAIL: the shared buffer's archive differs")
            t_ctl, t_py, t_sh = [], [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True)
                t_ctl.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                arc = c.compress(a, **kw)
                t_py.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                c.compress(shared, **kw)
                t_sh.append(time.perf_counter() - t0)
            del shared
            c.close()
    finally:
        daemon.stop()
    gb = a.nbytes / 1e9
    print("fzd %s backend, %d worker(s), %d MiB float32 %dx%d, %s eb=%g %s, ratio %.2f, %d runs each"
          % (args.backend, args.workers, args.mib, a.shape[0], a.shape[1], args.pipeline, args.eb,
             args.mode, a.nbytes / len(arc), args.repeat))
    for name, t in (("fzctl submit", t_ctl), ("Client.compress(a)", t_py),
                    ("  a in Client.empty()", t_sh)):
        print("  %-22s best %.3f s (%.0f MB/s)  median %.3f s (%.0f MB/s)"
              % (name, min(t), gb * 1e3 / min(t), statistics.median(t),
                 gb * 1e3 / statistics.median(t)))
    share = statistics.median(t_ctl) / statistics.median(t_py)
    print("  Python / fzctl throughput (medians): %.0f%% (bar: 90%%); from a shared buffer "
          "%.0f%%" % (100 * share, 100 * statistics.median(t_ctl) / statistics.median(t_sh)))


if __name__ == "__main__":
    main()
