#!/usr/bin/env python3
"""A file written through fzd reads with the HDF5 the reader already has.

pip's h5py (a virtual environment the test makes under the build
directory and keeps: h5py, netCDF4, numpy, msgpack, tables from PyPI, each
wheel with its own HDF5) writes a file with `import fzd.h5` and
`**fzd.h5.filter(...)` through a real fzd on the CPU backend
(FZD_HDF5_DAEMON=require; fzd's stats must count one job per chunk; the
plugin found through fzd.h5 alone, HDF5_PLUGIN_PATH unset).  Then, with
the daemon stopped, the file is read by pip's h5py, Debian's python3-h5py,
h5dump, and netCDF4 (pip's wheel and Debian's python3-netcdf4), each
Python reader having imported PyTables first in the same process (which
registers LZO at 305, the id fzd used to take), and every value is checked
against the bound: at most 1.0x eb (ABS), lossless and fill cells exact.

usage: anywhere.py FZD FZCTL PLUGIN_DIR H5DUMP VENV PYTHONPATH
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hdf5_filter import check, start_fzd  # noqa: E402

VENV_PACKAGES = ["h5py", "netCDF4", "numpy", "msgpack", "tables"]

# name: (dtype, shape, chunks, filter keywords, abs bound (None: exact))
DATASETS = {
    "t": ("f4", (40, 70, 90), (16, 32, 32), dict(pipeline="balanced", eb=1e-3, mode="abs"), 1e-3),
    "chain": ("f8", (90, 110), (40, 64),
              dict(pipeline="quant | diff | bitshuffle | rze(levels=2)", eb=1e-4, mode="abs"),
              1e-4),
    "big_endian": (">f4", (300, 200), (128, 128), dict(pipeline="ratio", eb=1e-2, mode="abs"),
                   1e-2),
    "counts": ("i4", (123, 77), (50, 50), dict(pipeline="lossless"), None),
    # The dataset's own fill value, not repeated in the filter's keywords.
    "sst": ("f4", (180, 360), (90, 180), dict(pipeline="balanced", eb=5e-3, mode="abs"), 5e-3),
}
FILL = -9999.0


def make(name):
    dtype, shape, _, _, _ = DATASETS[name]
    grids = np.meshgrid(*[np.linspace(0, 3, n) for n in shape], indexing="ij")
    smooth = sum(np.sin((i + 1) * g) for i, g in enumerate(grids)) * 20.0
    rng = np.random.default_rng(len(name))
    if dtype.endswith("i4"):
        return (smooth * 1000 + rng.integers(-99, 99, shape)).astype(dtype)
    x = (smooth + rng.normal(0, 0.1, shape)).astype(dtype)
    if name == "sst":
        x[(grids[0] > 2.2) & (grids[1] < 1.0)] = FILL  # land
    return x


def check_values(name, y, who):
    x = make(name)
    eb = DATASETS[name][4]
    check(y.shape == x.shape, "%s: %s read shape %s" % (who, name, y.shape))
    if eb is None:
        check(np.array_equal(np.asarray(y), x), "%s: %s is not exact" % (who, name))
        return "exact"
    err = float(np.abs(np.asarray(y, "f8") - x.astype("f8")).max())
    check(err <= eb, "%s: %s max error %g over the bound %g" % (who, name, err, eb))
    if name == "sst":
        check(np.all(np.asarray(y)[x == FILL] == FILL), "%s: fill cells not exact" % who)
    return "max error %.3g <= %g" % (err, eb)


# ---- roles, each in a child process of the interpreter named ---------------

def role_write(path):
    import h5py
    import fzd.h5
    check(fzd.h5.PLUGIN_PATH == os.environ["FZD_HDF5_PLUGIN_DIR"],
          "fzd.h5 added %r to the plugin path" % fzd.h5.PLUGIN_PATH)
    chunks = 0
    with h5py.File(path, "w") as f:
        for name, (dtype, shape, ch, kw, _) in DATASETS.items():
            extra = {"fillvalue": FILL} if name == "sst" else {}
            d = f.create_dataset(name, data=make(name), chunks=ch, **extra,
                                 **fzd.h5.filter(**kw))
            check(fzd.h5.FILTER_ID in d.id.get_create_plist().get_filter(0)[:1],
                  "%s: filter %r" % (name, d.id.get_create_plist().get_filter(0)))
            n = d.id.get_num_chunks()
            for i in range(n):
                check(d.id.get_chunk_info(i).filter_mask == 0,
                      "%s: chunk %d stored without the filter" % (name, i))
            chunks += n
        f.attrs["chunks"] = chunks
    print("pip h5py %s (HDF5 %s) wrote %s through fzd: %d chunks"
          % (h5py.__version__, h5py.version.hdf5_version, path, chunks))


def role_read_h5py(path):
    import tables  # registers LZO at 305 in its HDF5 before the read
    import h5py
    who = "h5py %s (HDF5 %s, PyTables %s imported)" % (h5py.__version__,
                                                       h5py.version.hdf5_version,
                                                       tables.__version__)
    with h5py.File(path, "r") as f:
        for name in DATASETS:
            print("%s: %s %s" % (who, name, check_values(name, f[name][...], who)))


def role_read_netcdf4(path):
    import tables
    import netCDF4
    who = "netCDF4 %s (HDF5 %s, PyTables %s imported)" % (netCDF4.__version__,
                                                         netCDF4.__hdf5libversion__,
                                                         tables.__version__)
    with netCDF4.Dataset(path, "r") as nc:
        for name in DATASETS:
            v = nc.variables[name]
            v.set_auto_mask(False)  # the fill cells are checked as values
            print("%s: %s %s" % (who, name, check_values(name, v[...], who)))


# ---- the driver -------------------------------------------------------------

def venv_python(venv):
    """The venv's interpreter, made (and the packages installed) when it
    does not import them yet; kept in the build directory between runs."""
    py = os.path.join(venv, "bin", "python")
    probe = "import " + ", ".join(VENV_PACKAGES)
    if os.path.exists(py) and subprocess.run([py, "-c", probe]).returncode == 0:
        return py
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--clear", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *VENV_PACKAGES], check=True, timeout=900)
    subprocess.run([py, "-c", probe], check=True)
    return py


def child(python, role, path, env):
    r = subprocess.run([python, os.path.abspath(__file__), "--role", role, path], env=env,
                       capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "role %s with %s exited with %d" % (role, python, r.returncode))


def h5dump_values(h5dump_bin, path, name, env):
    r = subprocess.run([h5dump_bin, "--enable-error-stack", "-m", "%.17g", "-d", "/" + name,
                        path], env=env, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "DATA {" in r.stdout, "h5dump failed: %s" % r.stderr[-2000:])
    check("fzd filter" not in r.stderr, "h5dump: %s" % r.stderr[-2000:])
    body = re.sub(r"\([0-9,]+\):", " ", r.stdout.split("DATA {", 1)[1].split("}", 1)[0])
    return np.array([float(v) for v in body.replace(",", " ").split()])


def run(fzd, fzctl, plugin_dir, h5dump_bin, venv, pythonpath):
    pip_py = venv_python(venv)
    with tempfile.TemporaryDirectory(prefix="fzd-hdf5-anywhere-") as tmp:
        path = os.path.join(tmp, "anywhere.h5")
        base = {k: v for k, v in os.environ.items()
                if k not in ("HDF5_PLUGIN_PATH", "FZD_HDF5_DAEMON", "FZD_HDF5_PLUGIN_DIR")}
        base["PYTHONPATH"] = pythonpath
        proc, sock = start_fzd(fzd, tmp)
        try:
            env = dict(base, FZD_SOCKET="unix:" + sock, FZD_HDF5_DAEMON="require",
                       FZD_HDF5_PLUGIN_DIR=plugin_dir)
            child(pip_py, "write", path, env)
            stats = subprocess.run([fzctl, "-S", sock, "stats", "--json"], capture_output=True,
                                   text=True, timeout=60, check=True).stdout
            jobs = json.loads(stats)["compress"]["count"]
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        check(code == 0, "fzd exited with %d after SIGTERM" % code)
        import h5py
        with h5py.File(path, "r") as f:
            chunks = int(f.attrs["chunks"])
        check(jobs == chunks, "fzd compressed %d chunks, the file has %d" % (jobs, chunks))
        print("fzd compressed all %d chunks; fzd stopped" % chunks)

        # No daemon from here on, and nowhere to find one.
        nowhere = dict(base, HDF5_PLUGIN_PATH=plugin_dir,
                       FZD_SOCKET="unix:" + os.path.join(tmp, "nobody.sock"))
        child(pip_py, "read-h5py", path, nowhere)
        child("/usr/bin/python3", "read-h5py", path, nowhere)
        child(pip_py, "read-netcdf4", path, nowhere)
        child("/usr/bin/python3", "read-netcdf4", path, nowhere)
        for name in DATASETS:
            got = h5dump_values(h5dump_bin, path, name, nowhere).reshape(DATASETS[name][1])
            print("h5dump: %s %s" % (name, check_values(name, got, "h5dump")))
    print("anywhere: all checks passed")


if __name__ == "__main__":
    try:
        if len(sys.argv) == 4 and sys.argv[1] == "--role":
            {"write": role_write, "read-h5py": role_read_h5py,
             "read-netcdf4": role_read_netcdf4}[sys.argv[2]](sys.argv[3])
        elif len(sys.argv) == 7:
            run(os.environ.get("FZD_BINARY") or sys.argv[1], *sys.argv[2:])
        else:
            sys.exit("usage: anywhere.py FZD FZCTL PLUGIN_DIR H5DUMP VENV PYTHONPATH")
    except AssertionError as e:
        sys.exit("FAIL: %s" % e)
