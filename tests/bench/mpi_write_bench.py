#!/usr/bin/env python3
"""mpi_write_bench.py - the aggregate throughput of one collective parallel
HDF5 write from 1, 2 and 4 MPI ranks on one machine, compressed by the fzd
filter against the same write uncompressed, and the bytes each puts in the
file.  Not run by ctest.

    /usr/bin/python3 tests/bench/mpi_write_bench.py BUILD_DIR FIELD.f32 ROWS COLS
        [--mib-per-rank 64] [--eb 1e-3] [--repeat 3] [--ranks 1,2,4]

FIELD is raw little-endian f32, ROWS x COLS (the real fields of
docs/benchmarks.md, e.g. trinidad_data_1201x2401.f32: 1201 rows of 2401).
Each rank writes about --mib-per-rank MiB, the field's rows repeated
(fz_mpi_write_bench, tests/bench/mpi_write_bench.c, built in
BUILD_DIR/tests/mpi).  Three writes per rank count:

  raw     no filter: the uncompressed write;
  engine  the fzd filter (balanced, REL --eb), each rank compressing its
          chunks in process (FZD_HDF5_DAEMON=off);
  fzd     the same through two fzd daemons on the CPU backend standing in
          for a node's two GPUs (FZD_SOCKET=unix:DIR/gpu%l.sock,
          FZD_DAEMONS_PER_NODE=2, FZD_HDF5_DAEMON=require).

Each is run --repeat times in turn and the best counts.  GB/s is 10^9 bytes
of uncompressed data per second of the whole write (create, write, close,
to the page cache), and again with rank 0's fsync of the file.  "chunks" is
the dataset's stored chunks (H5Dget_storage_size: data / chunks is the
preset's ratio on them), "file" the file's size.  The files go to $TMPDIR.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def start_fzd(fzd, tmp, name):
    sock = os.path.join(tmp, name + ".sock")
    config = os.path.join(tmp, name + ".json")
    with open(config, "w") as f:
        json.dump({"socket_path": sock, "backend": "cpu"}, f)
    notify_path = os.path.join(tmp, name + ".notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(60)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path)
    proc = subprocess.Popen([fzd, "--config", config], env=env, stdin=subprocess.DEVNULL,
                            stderr=open(os.path.join(tmp, name + ".log"), "w"))
    while "READY=1" not in notify.recv(4096).decode().split("\n"):
        pass
    notify.close()
    return proc


def compressed(fzctl, tmp):
    """(bytes in, bytes out) the two daemons have compressed so far."""
    total = [0, 0]
    for i in range(2):
        r = subprocess.run([fzctl, "-S", "unix:%s/gpu%d.sock" % (tmp, i), "stats", "--json"],
                           capture_output=True, text=True, check=True)
        c = json.loads(r.stdout)["compress"]
        total[0] += c["bytes_in"]
        total[1] += c["bytes_out"]
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("field")
    ap.add_argument("rows", type=int)
    ap.add_argument("cols", type=int)
    ap.add_argument("--mib-per-rank", type=float, default=64)
    ap.add_argument("--eb", type=float, default=1e-3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ranks", default="1,2,4")
    a = ap.parse_args()
    bench = os.path.join(a.build, "tests", "mpi", "fz_mpi_write_bench")
    fzd = os.path.join(a.build, "daemon", "fzd")
    fzctl = os.path.join(a.build, "client", "fzctl")
    plugins = os.path.join(a.build, "client", "hdf5", "plugin")
    field_bytes = a.rows * a.cols * 4
    tiles = max(1, round(a.mib_per_rank * 2**20 / field_bytes))

    tmp = tempfile.mkdtemp(prefix="fzd-mpi-bench-")
    daemons = [start_fzd(fzd, tmp, "gpu%d" % i) for i in range(2)]
    env = dict(os.environ, HDF5_PLUGIN_PATH=plugins, OMPI_MCA_rmaps_base_oversubscribe="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    modes = {
        "raw": ("raw", {}),
        "engine": ("fzd", {"FZD_HDF5_DAEMON": "off"}),
        "fzd": ("fzd", {"FZD_HDF5_DAEMON": "require", "FZD_SOCKET": "unix:%s/gpu%%l.sock" % tmp,
                        "FZD_DAEMONS_PER_NODE": "2"}),
    }
    best = {}
    try:
        for nranks in [int(r) for r in a.ranks.split(",")]:
            for _ in range(a.repeat):
                for name, (mode, extra) in modes.items():
                    path = os.path.join(tmp, "bench.h5")
                    before = compressed(fzctl, tmp)
                    r = subprocess.run(["mpirun", "-np", str(nranks), bench, path, a.field,
                                        str(a.rows), str(a.cols), str(tiles), mode, str(a.eb)],
                                       env=dict(env, **extra), capture_output=True, text=True,
                                       timeout=600)
                    if r.returncode != 0:
                        sys.exit("%s on %d ranks failed:\n%s%s" % (name, nranks, r.stdout,
                                                                   r.stderr))
                    kv = dict(w.split("=", 1) for w in r.stdout.split())
                    after = compressed(fzctl, tmp)
                    # The daemons' own count of the chunks they compressed:
                    # the preset's ratio on exactly these chunks.
                    if name == "fzd":
                        kv["chunk_ratio"] = (after[0] - before[0]) / (after[1] - before[1])
                    os.unlink(path)
                    key = (nranks, name)
                    if key not in best or float(kv["write_s"]) < float(best[key]["write_s"]):
                        best[key] = kv
    finally:
        for d in daemons:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)

    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)),
                             "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print("%s, %s, %d CPUs, commit %s; %s, balanced REL %g, %.0f MiB per rank, best of %d"
          % (datetime.date.today(), platform.node(), os.cpu_count(), commit,
             os.path.basename(a.field), a.eb, tiles * field_bytes / 2**20, a.repeat))
    print()
    print("| ranks | write | data MB | chunks MB | file MB | data / chunks | data / file | GB/s "
          "| GB/s with fsync |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (nranks, name), kv in sorted(best.items(), key=lambda i: (i[0][0], list(modes).index(
            i[0][1]))):
        raw, chunks, stored = (int(kv[k]) for k in ("raw_bytes", "chunk_bytes", "file_bytes"))
        print("| %d | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.3f | %.3f |"
              % (nranks, name, raw / 1e6, chunks / 1e6, stored / 1e6, raw / chunks,
                 raw / stored, raw / float(kv["write_s"]) / 1e9,
                 raw / float(kv["fsync_s"]) / 1e9))
    print()
    print("The daemons' stats, bytes in over bytes out (with HDF5's one fill chunk per rank): "
          + ", ".join("%d ranks %.2f" % (n, kv["chunk_ratio"])
                      for (n, name), kv in sorted(best.items()) if name == "fzd"))


if __name__ == "__main__":
    main()
