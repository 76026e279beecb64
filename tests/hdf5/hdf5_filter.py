#!/usr/bin/env python3
"""The fzd HDF5 filter (libh5z_fzd.so) driven the way users drive it.

h5py (Debian's python3-h5py, through HDF5_PLUGIN_PATH) writes chunked
datasets with the filter: f32 and f64 under each bound mode, integers
lossless, 2-D and 3-D, with partial edge chunks, first through a real fzd
on the CPU backend (FZD_HDF5_DAEMON=require, and fzd's stats must count one
job per chunk), then with no daemon reachable (the embedded engine), and
in one process across a daemon that stops between two datasets.  Every
file is read back with the daemon stopped and checked: max |x - x'| within
the bound (REL: relative to each chunk's range, as HDF5 hands the chunk to
the filter), lossless bit for bit.  Two datasets name their pipeline as chain text in
the parameters (pipeline 3, docs/hdf5.md), whose values the file keeps as
given; h5dump prints their values within the bound too, and chains the
engine refuses (malformed, or disagreeing with the bound given) fail the
dataset's creation with the engine's message.  h5dump prints values of both
files.  A
corrupted chunk must give an HDF5 error carrying fzd's message, from h5py and
from h5dump, and no crash; the other chunks still read.

usage: hdf5_filter.py FZD FZCTL PLUGIN_DIR H5DUMP
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

FILTER = 62160


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def opts(pipeline, mode, eb, fill=None):
    """cd_values of docs/hdf5.md: pipeline, mode, bound (two words), fill;
    a pipeline given as text is a chain (3), whose length and bytes follow
    the fill value, 4 bytes a value, little-endian."""
    lo, hi = struct.unpack("<II", struct.pack("<d", eb))
    chain = pipeline if isinstance(pipeline, str) else None
    cd = [CHAIN if chain else pipeline, mode, lo, hi]
    if fill is not None or chain:
        flo, fhi = struct.unpack("<II", struct.pack("<d", fill or 0.0))
        cd += [1 if fill is not None else 0, flo, fhi]
    if chain:
        text = chain.encode()
        text += b"\0" * (-len(text) % 4)
        cd += [len(chain.encode())] + list(struct.unpack("<%dI" % (len(text) // 4), text))
    return tuple(cd)


BALANCED, FAST, LOSSLESS, CHAIN = 0, 1, 2, 3
ABS, REL, PWREL = 0, 1, 2

# name: (dtype, shape, chunks, pipeline, mode, eb, fill)
DATASETS = {
    "f32_2d_rel": ("f4", (300, 257), (64, 100), BALANCED, REL, 1e-3, None),
    "f32_2d_rel_fill": ("f4", (130, 90), (50, 40), BALANCED, REL, 1e-3, -9999.0),
    "f64_3d_abs": ("f8", (37, 50, 41), (16, 16, 16), FAST, ABS, 1e-4, None),
    "f32_3d_pwrel": ("f4", (20, 30, 33), (8, 16, 16), BALANCED, PWREL, 1e-2, None),
    "i32_2d_lossless": ("i4", (123, 77), (50, 50), LOSSLESS, ABS, 0.0, None),
    "u16_3d_lossless": ("u2", (9, 40, 45), (4, 16, 32), LOSSLESS, ABS, 0.0, None),
    # Chains spelled out in the parameters.
    "f32_3d_chain_rze": ("f4", (20, 40, 50), (8, 16, 32),
                         "quant | diff | bitshuffle | rze(levels=2)", ABS, 1e-3, None),
    "f64_2d_chain_bitpack": ("f8", (90, 110), (40, 64), "quant | bitpack", REL, 1e-4, None),
}


def make(np, name):
    dtype, shape, _, _, _, _, fill = DATASETS[name]
    rng = np.random.default_rng(len(name) * 7919)
    grids = np.meshgrid(*[np.linspace(0, 3, n) for n in shape], indexing="ij")
    smooth = sum(np.sin((i + 1) * g) for i, g in enumerate(grids)) * 40.0
    if dtype.startswith("f"):
        x = (smooth + rng.normal(0, 0.5, shape) + 100.0).astype(dtype)
        if fill is not None:
            x.flat[::17] = fill
        return x
    info = np.iinfo(dtype)
    x = smooth * 100 + rng.integers(-50, 50, shape)
    return np.clip(x, info.min, info.max).astype(dtype)


def chunk_slices(shape, chunks):
    import itertools
    ranges = [range(0, n, c) for n, c in zip(shape, chunks)]
    for start in itertools.product(*ranges):
        yield tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, chunks, shape)), start


# ---- the roles run in child processes (the plugin keeps one connection per
# process, and reads its environment there) ---------------------------------

def role_write(path, via_daemon):
    import h5py
    import numpy as np
    with h5py.File(path, "w") as f:
        for name, (dtype, shape, chunks, pipe, mode, eb, fill) in DATASETS.items():
            x = make(np, name)
            kw = {"fillvalue": fill} if fill is not None else {}
            d = f.create_dataset(name, data=x, chunks=chunks, compression=FILTER,
                                 compression_opts=opts(pipe, mode, eb, fill), **kw)
            # h5py sets the filter optional: a chunk the filter failed on is
            # stored raw with its bit in the filter mask.  None may be.
            n = d.id.get_num_chunks()
            for i in range(n):
                info = d.id.get_chunk_info(i)
                check(info.filter_mask == 0, "%s: chunk %d stored without the filter" % (name, i))
            if pipe != LOSSLESS:
                check(d.id.get_storage_size() < x.nbytes,
                      "%s: %d bytes stored for %d" % (name, d.id.get_storage_size(), x.nbytes))
            f.attrs["chunks_" + name] = n
    print("wrote", path, "via daemon" if via_daemon else "in process")


def role_read(path):
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        for name, (dtype, shape, chunks, pipe, mode, eb, fill) in DATASETS.items():
            x = make(np, name)
            d = f[name]
            check(str(FILTER) in d._filters,
                  "%s: filter %r" % (name, d._filters))
            if not isinstance(pipe, str):
                # h5py 3.7 reads 16 parameters at most: a chain's are read
                # with h5dump (run()).
                given = opts(pipe, mode, eb, fill)
                stored = tuple(d.id.get_create_plist().get_filter_by_id(FILTER)[1])
                check(stored[:len(given)] == given, "%s: the file keeps %r for %r"
                      % (name, stored, given))
            y = d[...]
            check(y.dtype == x.dtype and y.shape == x.shape, "%s: %s %s" % (name, y.dtype, y.shape))
            if pipe == LOSSLESS:
                check(np.array_equal(x.view(np.uint8), y.view(np.uint8)),
                      "%s: lossless is not bit-exact" % name)
                continue
            err = np.abs(y.astype("f8") - x.astype("f8"))
            if mode == ABS:
                check(err.max() <= eb, "%s: max error %g > %g" % (name, err.max(), eb))
            elif mode == PWREL:
                lim = eb * np.abs(x.astype("f8"))
                check(np.all(err <= lim), "%s: %d values over the pointwise bound" %
                      (name, int(np.sum(err > lim))))
            else:
                worst = 0.0
                for sl, _ in chunk_slices(shape, chunks):
                    xs = x[sl].astype("f8")
                    vals = xs[xs != fill] if fill is not None else xs.ravel()
                    lo, hi = vals.min(), vals.max()
                    partial = any(s.stop - s.start < c for s, c in zip(sl, chunks))
                    if partial and fill is None:
                        # HDF5 pads an edge chunk with the fill value (0 by
                        # default) before the filter sees it: the range the
                        # bound is relative to includes the padding.
                        lo, hi = min(lo, 0.0), max(hi, 0.0)
                    bound = eb * (hi - lo)
                    e = err[sl].max()
                    check(e <= bound, "%s: chunk %r: error %g > %g" % (name, sl, e, bound))
                    worst = max(worst, e / bound)
                print("%s: worst chunk at %.3f of its bound" % (name, worst))
            if fill is not None:
                check(np.all(y[x == fill] == fill), "%s: fill values not exact" % name)
            print("%s: max error %.3g" % (name, err.max()))
    print("read", path)


def role_corrupt(path):
    """Damages one chunk of f32_2d_rel in place and expects an HDF5 error."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        d = f["f32_2d_rel"]
        info = d.id.get_chunk_info(1)
        good = d[0:64, 0:100]
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        b = bytearray(fh.read(16))
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(bytes(v ^ 0x5A for v in b))
    with h5py.File(path, "r") as f:
        d = f["f32_2d_rel"]
        off = info.chunk_offset
        try:
            d[off[0]:off[0] + 64, off[1]:off[1] + 100]
        except OSError as e:
            print("corrupt chunk:", e)
        else:
            raise AssertionError("a corrupted chunk read without an error")
        check(np.array_equal(d[0:64, 0:100], good), "the chunk before it no longer reads")
    print("corrupt: the damaged chunk gives an error, the others read")


def role_chain_refused(path):
    """Chains the engine refuses fail the dataset's creation, although h5py
    sets the filter optional, with the engine's message and code name: a
    malformed one, and one whose quant names a bound other than the one
    given.  The same chain with bound 0 given takes the chain's."""
    import h5py
    import numpy as np
    x = np.linspace(0, 50, 4000, dtype="f4").reshape(40, 100)
    cases = [
        ("quant | diff | bogus", 1e-3, "unknown stage 'bogus'"),
        ("quant(eb=0.01) | diff | rze", 1e-3,
         "the job's bound eb=0.001 mode=abs disagrees with the chain's quant(eb=0.01)"),
        ("quant | diff", 1e-3, "ends without a coder"),
    ]
    with h5py.File(path, "w") as f:
        for i, (chain, eb, want) in enumerate(cases):
            try:
                f.create_dataset("r%d" % i, data=x, chunks=(20, 50), compression=FILTER,
                                 compression_opts=opts(chain, ABS, eb))
            except (OSError, ValueError) as e:
                text = str(e)
                print("refused %r: %s" % (chain, text))
                check("fzd filter: " in text and want in text and "(EPIPELINE)" in text,
                      "%r: the error does not carry the engine's: %s" % (chain, text))
            else:
                raise AssertionError("%r with bound %g made a dataset" % (chain, eb))
            check("r%d" % i not in f, "%r left a dataset behind" % chain)
        d = f.create_dataset("own", data=x, chunks=(20, 50), compression=FILTER,
                             compression_opts=opts("quant(eb=0.01) | diff | rze", ABS, 0.0))
    with h5py.File(path, "r") as f:
        err = np.abs(f["own"][...].astype("f8") - x.astype("f8")).max()
        check(1e-3 < err <= 0.01, "the chain's own bound 0.01: max error %g" % err)
    print("chains the engine refuses are refused at creation; a chain's own bound stands")


def role_require_fails(path):
    """FZD_HDF5_DAEMON=require with no daemon, the filter mandatory: the
    write fails and HDF5's error stack holds fzd's message.  The chunk is
    larger than HDF5's chunk cache, so that the write passes it to the filter
    at once (HDF5 1.10 crashes closing a dataset whose cached chunk failed to
    flush, a fault of its own that the test stays clear of)."""
    import h5py
    import numpy as np
    from h5py import h5d, h5p, h5s, h5t, h5z
    with h5py.File(path, "w") as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_chunk((1024, 512))
        dcpl.set_filter(FILTER, h5z.FLAG_MANDATORY, opts(BALANCED, ABS, 1e-3))
        space = h5s.create_simple((1024, 512))
        dsid = h5d.create(f.id, b"x", h5t.IEEE_F32LE, space, dcpl=dcpl)
        x = np.ones((1024, 512), "f4")
        try:
            dsid.write(h5s.ALL, h5s.ALL, x)
        except (OSError, RuntimeError) as e:
            print("require without daemon:", e)
            check("fzd filter: no fzd at" in str(e), "the error does not say why: %s" % e)
        else:
            raise AssertionError("FZD_HDF5_DAEMON=require wrote without a daemon")


def role_daemon_goes(path):
    """One process writes a dataset through fzd, then the daemon stops
    (SIGTERM to FZD_TEST_PID) and the same process writes another: the
    connection it kept is gone, and the chunks are compressed in process
    (FZD_HDF5_DAEMON unset: auto), none left raw."""
    import h5py
    import numpy as np
    name = "f32_2d_rel"
    dtype, shape, chunks, pipe, mode, eb, fill = DATASETS[name]
    x = make(np, name)
    with h5py.File(path, "w") as f:
        for ds in ("before", "after"):
            if ds == "after":
                out = subprocess.run([os.environ["FZD_TEST_FZCTL"], "-S", os.environ["FZD_SOCKET"],
                                      "stats", "--json"], capture_output=True, text=True,
                                     timeout=60, check=True).stdout
                jobs = json.loads(out)["compress"]["count"]
                check(jobs == f.attrs["chunks_before"],
                      "fzd compressed %d chunks of %d" % (jobs, f.attrs["chunks_before"]))
                pid = int(os.environ["FZD_TEST_PID"])
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 60
                while os.path.exists(os.environ["FZD_SOCKET"][len("unix:"):]):
                    check(time.monotonic() < deadline, "fzd did not remove its socket")
                    time.sleep(0.05)
            d = f.create_dataset(ds, data=x, chunks=chunks, compression=FILTER,
                                 compression_opts=opts(BALANCED, ABS, 1e-2))
            for i in range(d.id.get_num_chunks()):
                check(d.id.get_chunk_info(i).filter_mask == 0,
                      "%s: chunk %d stored without the filter" % (ds, i))
            f.attrs["chunks_" + ds] = d.id.get_num_chunks()
    with h5py.File(path, "r") as f:
        for ds in ("before", "after"):
            err = np.abs(f[ds][...].astype("f8") - x.astype("f8")).max()
            check(err <= 1e-2, "%s: max error %g over 1e-2" % (ds, err))
    print("daemon gone between datasets: both written, within the bound")


# ---- the driver -------------------------------------------------------------

def start_fzd(binary, tmp):
    sock_path = os.path.join(tmp, "fzd.sock")
    config = os.path.join(tmp, "fzd.json")
    with open(config, "w") as f:
        f.write('{"socket_path": "%s", "backend": "cpu", "workers": 2}\n' % sock_path)
    notify_path = os.path.join(tmp, "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(30)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path)
    for k in ("LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC"):
        env.pop(k, None)
    log = open(os.path.join(tmp, "fzd.log"), "w")
    proc = subprocess.Popen([binary, "--config", config, "--backend", "cpu"], env=env,
                            stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        check(proc.poll() is None, "fzd exited with %r at start-up" % proc.returncode)
        check(time.monotonic() < deadline, "fzd sent no READY=1")
        try:
            note = notify.recv(4096).decode()
        except socket.timeout:
            continue
        if "READY=1" in note.split("\n"):
            break
    notify.close()
    os.unlink(notify_path)  # free for the next daemon of the test
    return proc, sock_path


def child(role, path, env, expect_ok=True):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--role", role, path],
                       env=env, capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "role %s on %s exited with %d" % (role, path, r.returncode))
    return r


def h5dump(h5dump_bin, path, env, dataset, start, count, extra=()):
    return subprocess.run([h5dump_bin, "--enable-error-stack", *extra, "-d", dataset,
                           "-s", start, "-c", count, path],
                          env=env, capture_output=True, text=True, timeout=120)


def exports_only_h5pl(plugin_dir):
    """The plugin exports the two H5PL calls and hides libfzclient and the
    engine linked into it."""
    import ctypes
    lib = ctypes.CDLL(os.path.join(plugin_dir, "libh5z_fzd.so"))
    for name in ("H5PLget_plugin_type", "H5PLget_plugin_info"):
        check(hasattr(lib, name), "the plugin does not export %s" % name)
    for name in ("fz_client_connect", "fz_plan_create", "fz_decompress", "fzp_pack_key"):
        check(not hasattr(lib, name), "the plugin exports %s" % name)
    check(lib.H5PLget_plugin_type() == 0, "plugin type %d, not H5PL_TYPE_FILTER"
          % lib.H5PLget_plugin_type())


def run(fzd, fzctl, plugin_dir, h5dump_bin):
    import numpy as np
    exports_only_h5pl(plugin_dir)
    with tempfile.TemporaryDirectory(prefix="fzd-hdf5-") as tmp:
        base = dict(os.environ, HDF5_PLUGIN_PATH=plugin_dir)
        base.pop("FZD_HDF5_DAEMON", None)
        nowhere = dict(base, FZD_SOCKET="unix:" + os.path.join(tmp, "nobody.sock"))
        with_daemon = os.path.join(tmp, "daemon.h5")
        in_process = os.path.join(tmp, "local.h5")

        proc, sock = start_fzd(fzd, tmp)
        try:
            env = dict(base, FZD_SOCKET="unix:" + sock, FZD_HDF5_DAEMON="require")
            child("write", with_daemon, env)
            stats = subprocess.run([fzctl, "-S", sock, "stats", "--json"], capture_output=True,
                                   text=True, timeout=60, check=True).stdout
            print("fzd stats:", stats.strip())
            import h5py
            with h5py.File(with_daemon, "r") as f:
                chunks = sum(int(f.attrs["chunks_" + n]) for n in DATASETS)
            done = json.loads(stats)
            jobs = done["compress"]["count"]
            check(jobs == chunks, "fzd compressed %r chunks, the file has %d" % (jobs, chunks))
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        check(code == 0, "fzd exited with %d after SIGTERM" % code)

        # A daemon that goes away while a writer holds its connection.
        proc, sock = start_fzd(fzd, tmp)
        try:
            stopped = os.path.join(tmp, "stopped.h5")
            child("daemon-goes", stopped, dict(base, FZD_SOCKET="unix:" + sock,
                                                FZD_TEST_PID=str(proc.pid), FZD_TEST_FZCTL=fzctl))
            code = proc.wait(timeout=60)
            check(code == 0, "fzd exited with %d after SIGTERM" % code)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

        # No daemon from here on.
        child("read", with_daemon, dict(nowhere, FZD_HDF5_DAEMON="require"))
        child("write", in_process, nowhere)
        child("read", in_process, nowhere)
        child("require-fails", os.path.join(tmp, "req.h5"),
              dict(nowhere, FZD_HDF5_DAEMON="require"))
        child("chain-refused", os.path.join(tmp, "chains.h5"), nowhere)

        for path in (with_daemon, in_process):
            r = h5dump(h5dump_bin, path, nowhere, "/i32_2d_lossless", "0,0", "2,5")
            check(r.returncode == 0, "h5dump failed: %s" % r.stderr)
            got = [int(v) for v in r.stdout.split("DATA {")[1].split("}")[0]
                   .replace("(0,0):", "").replace("(1,0):", "").replace(",", " ").split()]
            want = make(np, "i32_2d_lossless")[0:2, 0:5].ravel().tolist()
            check(got == want, "h5dump printed %r, the data is %r" % (got, want))
            print("h5dump", os.path.basename(path), "prints", got)
            # A chain's dataset, its floats printed in full.
            name = "f32_3d_chain_rze"
            r = h5dump(h5dump_bin, path, nowhere, "/" + name, "3,10,20", "2,3,20",
                       ["-m", "%.9g"])
            check(r.returncode == 0, "h5dump failed: %s" % r.stderr)
            body = re.sub(r"\([0-9,]+\):", " ", r.stdout.split("DATA {")[1].split("}")[0])
            got = np.array([float(v) for v in body.replace(",", " ").split()])
            want = make(np, name)[3:5, 10:13, 20:40].ravel().astype("f8")
            check(got.shape == want.shape, "h5dump printed %d values of %s, not %d"
                  % (got.size, name, want.size))
            eb = DATASETS[name][5]
            check(np.abs(got - want).max() <= eb, "h5dump's %s: error %g over %g"
                  % (name, np.abs(got - want).max(), eb))
            print("h5dump", os.path.basename(path), name, "within %g" % eb)
            # The parameters as the file keeps them: the writer's, then the
            # type and the chunk's shape.
            for name, (dtype, shape, chunks, pipe, mode, eb, fill) in DATASETS.items():
                if not isinstance(pipe, str):
                    continue
                r = subprocess.run([h5dump_bin, "-p", "-H", "-d", "/" + name, path], env=nowhere,
                                   capture_output=True, text=True, timeout=120)
                check(r.returncode == 0, "h5dump -p failed: %s" % r.stderr)
                m = re.search(r"FILTER_ID\s+%d.*?PARAMS\s*\{([^}]*)\}" % FILTER, r.stdout, re.S)
                check(m, "h5dump -p shows no fzd filter for %s: %s" % (name, r.stdout))
                # h5dump prints them signed, and reads 20 at most: past
                # those it prints what its buffer held.
                stored = tuple(int(v) & 0xFFFFFFFF for v in m.group(1).split())
                fz_dtype = {"f4": 9, "f8": 10}[dtype]
                want = opts(pipe, mode, eb, fill) + (fz_dtype, len(chunks)) + chunks
                check(len(stored) == len(want) and stored[:20] == want[:20],
                      "%s: the file keeps %r, not %r" % (name, stored, want))
            print("h5dump", os.path.basename(path), "shows the chains' parameters")
        empty = os.path.join(tmp, "no-plugins")
        os.mkdir(empty)
        r = h5dump(h5dump_bin, with_daemon, dict(nowhere, HDF5_PLUGIN_PATH=empty),
                   "/i32_2d_lossless", "0,0", "2,5")
        # h5dump exits 0 when it cannot read a dataset; it prints no values.
        check(r.stdout.split("DATA {")[1].split("}")[0].strip() == "",
              "h5dump printed data without the plugin: %s" % r.stdout)

        damaged = os.path.join(tmp, "damaged.h5")
        shutil.copy(with_daemon, damaged)
        child("corrupt", damaged, nowhere)
        r = h5dump(h5dump_bin, damaged, nowhere, "/f32_2d_rel", "0,0", "300,257")
        print("h5dump of the damaged chunk exited with", r.returncode)
        check(r.returncode >= 0, "h5dump was killed by signal %d" % -r.returncode)
        check("fzd filter" in r.stderr, "h5dump's errors do not carry fzd's: %s" % r.stderr[-2000:])
        print("h5dump of the damaged chunk fails with:",
              [l.strip() for l in r.stderr.splitlines() if "fzd filter" in l][0])
    print("hdf5: all checks passed")


if __name__ == "__main__":
    try:
        if len(sys.argv) == 4 and sys.argv[1] == "--role":
            {"write": lambda p: role_write(p, os.environ.get("FZD_HDF5_DAEMON") == "require"),
             "read": role_read, "corrupt": role_corrupt, "daemon-goes": role_daemon_goes,
             "require-fails": role_require_fails, "chain-refused": role_chain_refused}[sys.argv[2]](sys.argv[3])
        elif len(sys.argv) == 5:
            run(os.environ.get("FZD_BINARY") or sys.argv[1], *sys.argv[2:])
        else:
            sys.exit("usage: hdf5_filter.py FZD FZCTL PLUGIN_DIR H5DUMP")
    except AssertionError as e:
        sys.exit("FAIL: %s" % e)
