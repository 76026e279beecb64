#!/usr/bin/env python3
"""Files made chunk by chunk (h5py's direct chunk writes, in a process that
finds no plugin, so the filter's parameters are stored exactly as given):

- A file as fzd wrote it with the legacy id 305 (the parameters and chunks
  of a file written with 62160, put under 305), beside a real LZO dataset
  of PyTables' and a gzip one.  libh5z_fzd_legacy.so reads it; it refuses
  to write 305 with a message that names 62160, and a chunk under 305 that
  is not an fzd archive (LZO's) with one that names LZO and PyTables.
  `python3 -m fzd.h5 migrate` rewrites it to 62160 without decoding: the
  stored chunks are byte for byte the legacy ones, the attributes, groups
  and the LZO and gzip datasets are kept, and the values read with only
  libh5z_fzd.so are bit-identical to what the legacy plugin read.  In
  place too, with PyTables imported in the migrating process.
- Hostile parameters (issue 27): a chunk whose stored parameters lack the
  chunk's shape is not decoded (a 64 MiB bomb in a chunk of 100 floats),
  and an archive of i32 values under an f32 dataset of the same byte count
  is refused, not read as garbage.

usage: direct_chunks.py PLUGIN_DIR PYTHONPATH
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hdf5_filter import check  # noqa: E402

NEW, LEGACY = 62160, 305


def words(v):
    return struct.unpack("<II", struct.pack("<d", v))


def field(shape, seed):
    grids = np.meshgrid(*[np.linspace(0, 3, n) for n in shape], indexing="ij")
    rng = np.random.default_rng(seed)
    return (sum(np.sin((i + 1) * g) for i, g in enumerate(grids)) * 30
            + rng.normal(0, 0.2, shape)).astype("f4")


# ---- roles -------------------------------------------------------------------

def role_write_new(path):
    """With the plugin: the datasets whose chunks the legacy file takes, a
    chain among them (more than the 16 parameters h5py reads)."""
    import h5py
    import fzd.h5
    with h5py.File(path, "w") as f:
        g = f.create_group("run1")
        g.attrs["units"] = "K"
        d = g.create_dataset("t", data=field((60, 80), 1), chunks=(32, 32),
                             **fzd.h5.filter(eb=1e-3, mode="abs"))
        d.attrs["scale"] = np.float32(1.5)
        f.create_dataset("chain", data=field((50, 70), 2).astype("f8"), chunks=(25, 70),
                         **fzd.h5.filter(pipeline="quant | diff | bitshuffle | rze(levels=2)",
                                         eb=1e-4, mode="abs"))
        f.create_dataset("counts", data=np.arange(5000, dtype="i2").reshape(50, 100),
                         chunks=(50, 50), **fzd.h5.filter(pipeline="lossless"))
        # An i32 chunk of the byte count of a 100-float chunk, and a bomb:
        # 64 MiB of zeros, a small archive.
        f.create_dataset("i32", data=np.arange(100, dtype="i4"), chunks=(100,),
                         **fzd.h5.filter(pipeline="lossless"))
        f.create_dataset("bomb", data=np.zeros(1 << 24, "i4"), chunks=(1 << 24,),
                         **fzd.h5.filter(pipeline="lossless"))


def role_write_legacy(path):
    """Without any plugin: the new file's datasets under 305, their
    parameters and stored chunks as they are (PyTables imported registers
    LZO at 305, which keeps parameters as given, so that a mandatory 305
    can be set as C writers set it); a real LZO dataset, a gzip one; and
    the hostile ones."""
    import h5py
    import fzd.h5
    import tables  # noqa: F401
    from h5py import h5d, h5p, h5z
    new = path + ".new"
    with h5py.File(new, "r") as fin, h5py.File(path, "w") as fout:
        for name in ("run1/t", "chain", "counts"):
            src = fin[name]
            _, cd = fzd.h5._filter_params(src.id.get_create_plist(), NEW)
            dcpl = h5p.create(h5p.DATASET_CREATE)
            dcpl.set_chunk(src.chunks)
            # run1/t as C writers set it (mandatory), the others as h5py does.
            dcpl.set_filter(LEGACY, h5z.FLAG_MANDATORY if name == "run1/t" else h5z.FLAG_OPTIONAL,
                            cd)
            grp = fout.require_group(os.path.dirname(name) or "/")
            dst = h5d.create(grp.id, os.path.basename(name).encode(), src.id.get_type(),
                             src.id.get_space(), dcpl=dcpl)
            for i in range(src.id.get_num_chunks()):
                info = src.id.get_chunk_info(i)
                mask, data = src.id.read_direct_chunk(info.chunk_offset)
                dst.write_direct_chunk(info.chunk_offset, data, mask)
            for k, v in src.attrs.items():
                h5py.Dataset(dst).attrs[k] = v
        fout["run1"].attrs["units"] = "K"
        fout.create_dataset("gz", data=np.arange(300.0), chunks=(100,), compression="gzip")
        fout["gz_link"] = h5py.SoftLink("/gz")
        arc = {n: fin[n].id.read_direct_chunk((0,) * fin[n].ndim)[1] for n in ("i32", "bomb")}
        f32_cd = (0, 0, *words(1e-3), 0, 0, 0)
        for name, cd, data in (("hostile/no_shape", f32_cd, arc["bomb"]),
                               ("hostile/other_dtype", f32_cd + (9, 1, 100), arc["i32"])):
            dcpl = h5p.create(h5p.DATASET_CREATE)
            dcpl.set_chunk((100,))
            dcpl.set_filter(NEW, h5z.FLAG_OPTIONAL, cd)
            grp = fout.require_group("hostile")
            dst = h5d.create(grp.id, os.path.basename(name).encode(),
                             h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple((100,)), dcpl=dcpl)
            dst.write_direct_chunk((0,), data, 0)
    with h5py.File(path, "a") as f:
        f.create_dataset("lzo", data=np.arange(1000, dtype="f8"), chunks=(250,), compression=LEGACY)
        check(f["lzo"].id.get_create_plist().get_filter(0)[3] == b"lzo", "no LZO dataset")
    print("legacy file written")


def read_all(f):
    return {n: f[n][...] for n in ("run1/t", "chain", "counts")}


def role_read_legacy(path):
    import h5py
    with h5py.File(path, "r") as f:
        vals = read_all(f)
        try:
            f["lzo"][...]
        except OSError as e:
            check("LZO (PyTables)" in str(e) and "not an fzd archive" in str(e),
                  "an LZO chunk under the legacy plugin: %s" % e)
            print("LZO chunk, legacy plugin:", e)
        else:
            raise AssertionError("the legacy plugin read an LZO chunk")
    np.savez(path + ".legacy.npz", **{k.replace("/", "_"): v for k, v in vals.items()})
    with h5py.File(path + ".w.h5", "w") as f:
        try:
            f.create_dataset("x", data=np.ones(100, "f4"), chunks=(50,), compression=LEGACY,
                             compression_opts=(0, 0, *words(1e-3)))
        except (OSError, ValueError) as e:
            check("read-only" in str(e) and str(NEW) in str(e), "legacy write: %s" % e)
            print("legacy write refused:", e)
        else:
            raise AssertionError("the legacy plugin wrote filter 305")
    print("legacy plugin read the 305 datasets")


def role_read_migrated(path):
    """Only libh5z_fzd.so on the plugin path."""
    import h5py
    import tables  # noqa: F401  (so the LZO dataset reads, as PyTables users read it)
    legacy = np.load(path + ".legacy.npz") if os.path.exists(path + ".legacy.npz") else \
        np.load(os.environ["FZD_TEST_LEGACY_NPZ"])
    with h5py.File(path, "r") as f, h5py.File(os.environ["FZD_TEST_LEGACY"], "r") as old:
        for name, v in read_all(f).items():
            d = f[name]
            ids = [d.id.get_create_plist().get_filter(i)[0]
                   for i in range(d.id.get_create_plist().get_nfilters())]
            check(ids == [NEW], "%s: filters %r after migrate" % (name, ids))
            import fzd.h5
            was = fzd.h5._filter_params(old[name].id.get_create_plist(), LEGACY)
            now = fzd.h5._filter_params(d.id.get_create_plist(), NEW)
            check(now == was, "%s: flags and parameters %r became %r" % (name, was, now))
            want = legacy[name.replace("/", "_")]
            check(v.dtype == want.dtype and v.tobytes() == want.tobytes(),
                  "%s: the migrated values differ from the legacy read" % name)
            for i in range(d.id.get_num_chunks()):
                off = d.id.get_chunk_info(i).chunk_offset
                check(d.id.read_direct_chunk(off) == old[name].id.read_direct_chunk(off),
                      "%s: chunk %r was not copied as it was" % (name, off))
        check(f["run1"].attrs["units"] == "K" and f["run1/t"].attrs["scale"] == 1.5,
              "attributes lost")
        check(np.array_equal(f["lzo"][...], np.arange(1000.0)), "the LZO dataset changed")
        check(f["lzo"].id.get_create_plist().get_filter(0)[0] == LEGACY, "LZO's id changed")
        check(np.array_equal(f["gz_link"][...], np.arange(300.0)), "gzip or its link lost")
    print("migrated: values bit-identical to the legacy read, chunks copied as they were")


def role_hostile(path):
    import h5py
    with h5py.File(path, "r") as f:
        for name, want in (("hostile/no_shape", "do not describe a chunk"),
                           ("hostile/other_dtype", "EDTYPE")):
            try:
                f[name][...]
            except OSError as e:
                check(want in str(e), "%s: %s" % (name, e))
                print("%s refused: %s" % (name, e))
            else:
                raise AssertionError("%s read" % name)


def role_resolve(plugin_dir):
    """The plugin takes HDF5's calls from a library already loaded: called
    by something that is not HDF5 (ctypes here, as a program registering
    the filter itself would) it falls back on the loaded library that
    defines H5Zregister, and with none loaded it refuses and says why."""
    import ctypes
    lib = ctypes.CDLL(os.path.join(plugin_dir, "libh5z_fzd.so"))
    lib.H5PLget_plugin_info.restype = ctypes.c_void_p
    check(lib.H5PLget_plugin_info() is None, "plugin info with no HDF5 loaded")
    import h5py  # noqa: F401  (loads Debian's HDF5)
    info = lib.H5PLget_plugin_info()
    check(info is not None, "no plugin info with h5py's HDF5 loaded")
    version, filter_id = ctypes.cast(info, ctypes.POINTER(ctypes.c_int * 2)).contents
    check((version, filter_id) == (1, NEW), "class version %d id %d" % (version, filter_id))
    print("resolved from the loaded HDF5 when not called by it: id", filter_id)


# ---- the driver ------------------------------------------------------------

def child(role, path, env, argv=None):
    cmd = argv or [sys.executable, os.path.abspath(__file__), "--role", role, path]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "%s exited with %d" % (role, r.returncode))


def run(plugin_dir, pythonpath):
    with tempfile.TemporaryDirectory(prefix="fzd-hdf5-direct-") as tmp:
        only_new = os.path.join(tmp, "only-new")
        empty = os.path.join(tmp, "empty")
        os.mkdir(only_new)
        os.mkdir(empty)
        os.symlink(os.path.join(plugin_dir, "libh5z_fzd.so"),
                   os.path.join(only_new, "libh5z_fzd.so"))
        base = {k: v for k, v in os.environ.items()
                if k not in ("FZD_HDF5_PLUGIN_DIR", "FZD_SOCKET")}
        base.update(PYTHONPATH=pythonpath, FZD_HDF5_DAEMON="off")
        legacy = os.path.join(tmp, "legacy.h5")
        child("write-new", legacy + ".new", dict(base, HDF5_PLUGIN_PATH=plugin_dir))
        child("write-legacy", legacy, dict(base, HDF5_PLUGIN_PATH=empty))
        child("read-legacy", legacy, dict(base, HDF5_PLUGIN_PATH=plugin_dir))
        child("hostile", legacy, dict(base, HDF5_PLUGIN_PATH=plugin_dir))
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--role", "resolve",
                            plugin_dir], env=base, capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        check(r.returncode == 0, "resolve: %s" % r.stderr)
        check("fzd filter: cannot use the HDF5 library that loaded it: no HDF5 library" in
              r.stderr, "with no HDF5 loaded the plugin did not say why: %r" % r.stderr)

        migrated = os.path.join(tmp, "migrated.h5")
        # Migrate decodes nothing, but HDF5 creates no dataset with a
        # mandatory filter it cannot find: the plugin is on the path.
        env = dict(base, HDF5_PLUGIN_PATH=plugin_dir)
        child("migrate", legacy, env, [sys.executable, "-m", "fzd.h5", "migrate", legacy, migrated])
        check_env = dict(base, HDF5_PLUGIN_PATH=only_new, FZD_TEST_LEGACY=legacy,
                         FZD_TEST_LEGACY_NPZ=legacy + ".legacy.npz")
        child("read-migrated", migrated, check_env)

        # In place, PyTables imported in the migrating process.
        inplace = os.path.join(tmp, "inplace.h5")
        shutil.copy(legacy, inplace)
        child("migrate", inplace, env, [
            sys.executable, "-c", "import sys, tables, fzd.h5; "
            "sys.exit(fzd.h5.main(['migrate', sys.argv[1]]))", inplace])
        child("read-migrated", inplace, check_env)
        check(not os.path.exists(inplace + ".fzd-migrate.tmp"), "the temporary file stayed")
    print("direct chunks: all checks passed")


if __name__ == "__main__":
    try:
        if len(sys.argv) == 4 and sys.argv[1] == "--role":
            {"write-new": role_write_new, "write-legacy": role_write_legacy,
             "read-legacy": role_read_legacy, "read-migrated": role_read_migrated,
             "hostile": role_hostile, "resolve": role_resolve}[sys.argv[2]](sys.argv[3])
        elif len(sys.argv) == 3:
            run(*sys.argv[1:])
        else:
            sys.exit("usage: direct_chunks.py PLUGIN_DIR PYTHONPATH")
    except AssertionError as e:
        sys.exit("FAIL: %s" % e)
