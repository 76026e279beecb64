"""The fzd HDF5 filter from h5py, in the style of hdf5plugin (docs/hdf5.md).

    import h5py, fzd.h5
    with h5py.File("out.h5", "w") as f:
        f.create_dataset("t", data=x, chunks=(64, 64),
                         **fzd.h5.filter(pipeline="balanced", eb=1e-3, mode="rel"))

Importing this module puts the folder of the plugin (libh5z_fzd.so) first in
HDF5's plugin search path through h5py.h5pl.prepend, when h5py is
importable: $FZD_HDF5_PLUGIN_DIR when set, else the plugins/ folder inside
the installed fzd package, else nothing is added and HDF5_PLUGIN_PATH is
used as it is.  Reading needs no daemon; writing goes through fzd when one
answers and compresses in process otherwise (the plugin decides).

`python3 -m fzd.h5 migrate IN.h5 [OUT.h5]` rewrites a file whose datasets
use the legacy filter id 305 to FILTER_ID, copying the stored chunks as
they are (never decoded and compressed again).
"""
import os
import struct
import sys
from collections.abc import Mapping

FILTER_ID = 62160
"""The filter id, from the range HDF5 leaves for unregistered use."""
LEGACY_FILTER_ID = 305
"""The id files took before; registered to LZO (PyTables).  Read-only."""

PRESETS = {"balanced": 0, "fast": 1, "lossless": 2, "ratio": 4}
CHAIN = 3
MODES = {"abs": 0, "rel": 1, "pwrel": 2}
CHAIN_MAX = 968
# The magic every fzd archive begins with (docs/format.md).
_MAGIC = b"\x89FZA"


def _plugin_dir():
    """The folder to prepend, or None."""
    env = os.environ.get("FZD_HDF5_PLUGIN_DIR")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins")
    if os.path.isfile(os.path.join(here, "libh5z_fzd.so")):
        return here
    return None


PLUGIN_PATH = _plugin_dir()
"""The folder this module added to HDF5's plugin path (None: none added)."""


def _register():
    if PLUGIN_PATH is None:
        return
    try:
        import h5py
    except ImportError:
        return
    h5py.h5pl.prepend(os.fsencode(PLUGIN_PATH))


_register()


def _words(value):
    return struct.unpack("<II", struct.pack("<d", float(value)))


def filter_opts(pipeline="balanced", eb=1e-3, mode="rel", fill_value=None):
    """The filter's parameters (cd_values, docs/hdf5.md) as a tuple."""
    if mode not in MODES:
        raise ValueError("mode %r: give one of %s" % (mode, ", ".join(MODES)))
    if pipeline == "lossless" and fill_value is None:
        return (PRESETS["lossless"],)
    cd = [PRESETS.get(pipeline, CHAIN), MODES[mode], *_words(eb)]
    chain = pipeline not in PRESETS
    if fill_value is not None or chain:
        cd += [0 if fill_value is None else 1, *_words(0.0 if fill_value is None else fill_value)]
    if chain:
        text = pipeline.encode()
        if not 1 <= len(text) <= CHAIN_MAX:
            raise ValueError("a chain text of %d bytes: give 1 to %d" % (len(text), CHAIN_MAX))
        padded = text + b"\0" * (-len(text) % 4)
        cd += [len(text), *struct.unpack("<%dI" % (len(padded) // 4), padded)]
    return tuple(cd)


class Filter(Mapping):
    """create_dataset's keywords for the fzd filter: `**Filter(...)` gives
    compression=FILTER_ID and compression_opts.  pipeline is a preset name
    (balanced, fast, ratio, lossless) or any chain text fzd takes; eb and
    mode the bound (abs, rel: relative to each chunk's range, pwrel);
    fill_value a value kept exact and out of the range (None: the
    dataset's own fill value, when it has one)."""

    filter_id = FILTER_ID

    def __init__(self, pipeline="balanced", eb=1e-3, mode="rel", fill_value=None):
        self.filter_options = filter_opts(pipeline, eb, mode, fill_value)
        self._kw = {"compression": FILTER_ID, "compression_opts": self.filter_options}

    def __getitem__(self, key):
        return self._kw[key]

    def __iter__(self):
        return iter(self._kw)

    def __len__(self):
        return len(self._kw)

    def __repr__(self):
        return "fzd.h5.Filter(%r)" % (self._kw,)


def filter(pipeline="balanced", eb=1e-3, mode="rel", fill_value=None):  # noqa: A001
    """The fzd filter's keywords for create_dataset (see Filter)."""
    return Filter(pipeline, eb, mode, fill_value)


# ---- migrate: 305 -> FILTER_ID ---------------------------------------------

def _hdf5_library():
    """ctypes handle of the HDF5 library h5py uses (already loaded): h5py
    reads at most 16 filter parameters, and a chain has more."""
    import ctypes
    import h5py  # noqa: F401  (loads its HDF5)
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/" in line}
    h5py_dir = os.path.dirname(os.path.abspath(h5py.__file__))
    cands = sorted(p for p in paths if os.path.basename(p).startswith("libhdf5")
                   and "_hl" not in os.path.basename(p))
    # pip's h5py carries its own under h5py.libs, beside the package.
    own = [p for p in cands if os.path.dirname(p).startswith(h5py_dir)]
    for path in own + cands:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "H5Pget_filter_by_id2"):
            return lib
    raise RuntimeError("cannot find the HDF5 library h5py uses")


def _filter_params(dcpl, filter_id):
    """(flags, cd_values) of filter_id in the property list, all of them."""
    import ctypes
    lib = _hdf5_library()
    fn = lib.H5Pget_filter_by_id2
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_uint),
                   ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_uint),
                   ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint)]
    flags = ctypes.c_uint(0)
    n = ctypes.c_size_t(256)
    cd = (ctypes.c_uint * 256)()
    if fn(dcpl.id, filter_id, ctypes.byref(flags), ctypes.byref(n), cd, 0, None, None) < 0:
        raise RuntimeError("the dataset has no filter %d" % filter_id)
    if n.value > 256:
        raise RuntimeError("%d filter parameters, more than fzd ever stores" % n.value)
    return flags.value, tuple(cd[:n.value])


def _is_fzd_legacy(dset):
    """Whether dset uses filter 305 as fzd did: its stored chunks are fzd
    archives (LZO's, PyTables', are left alone)."""
    dcpl = dset.id.get_create_plist()
    ids = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
    if LEGACY_FILTER_ID not in ids:
        return False
    for i in range(dset.id.get_num_chunks()):
        info = dset.id.get_chunk_info(i)
        mask, data = dset.id.read_direct_chunk(info.chunk_offset)
        if mask & (1 << ids.index(LEGACY_FILTER_ID)):
            continue  # this chunk skipped the filter
        return bytes(data[:4]) == _MAGIC
    # No chunk written: the parameters tell, set_local's layout (the type
    # and the chunk's shape at the end).
    _, cd = _filter_params(dcpl, LEGACY_FILTER_ID)
    return _completed_layout(cd)


def _completed_layout(cd):
    """Whether cd has the layout set_local gives: the writer's values (7
    for a preset, 8 and the text's for a chain), the type, the rank and
    that many dimensions."""
    if len(cd) < 7 or cd[0] not in (0, 1, 2, 3, 4):
        return False
    base = 7
    if cd[0] == CHAIN:
        if len(cd) < 8 or not 1 <= cd[7] <= CHAIN_MAX:
            return False
        base = 8 + (cd[7] + 3) // 4
    return len(cd) > base + 1 and 1 <= cd[base + 1] <= 4 and len(cd) == base + 2 + cd[base + 1]


def _copy_attrs(src, dst):
    """Every attribute of src onto dst, in its own stored type."""
    import numpy as np
    from h5py import h5a, h5t
    for name in src.attrs:
        aid = h5a.open(src.id, name.encode())
        tid = aid.get_type()
        if tid.get_class() == h5t.REFERENCE:
            raise RuntimeError("%s: attribute %r holds object references, which a copy "
                               "cannot keep" % (src.name, name))
        out = h5a.create(dst.id, name.encode(), tid, aid.get_space())
        buf = np.empty(aid.shape, dtype=aid.dtype)
        aid.read(buf, mtype=tid)
        out.write(buf, mtype=tid)


def _migrate_dataset(src, group, name):
    """A copy of src named name in group, 305 renamed FILTER_ID, its stored
    chunks as they are; returns the number of chunks."""
    import h5py
    from h5py import h5d
    dcpl = src.id.get_create_plist()
    filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    full = {LEGACY_FILTER_ID: _filter_params(dcpl, LEGACY_FILTER_ID)}
    # The pipeline in the same order, 305 renamed: every filter removed and
    # set again with all its parameters.
    for code, _, _, _ in filters:
        if code != LEGACY_FILTER_ID:
            full[code] = _filter_params(dcpl, code)
    for code, _, _, _ in filters:
        dcpl.remove_filter(code)
    for code, _, _, _ in filters:
        flags, cd = full[code]
        dcpl.set_filter(FILTER_ID if code == LEGACY_FILTER_ID else code, flags, cd)
    try:
        dst = h5d.create(group.id, name.encode(), src.id.get_type(), src.id.get_space(),
                         dcpl=dcpl)
    except (OSError, ValueError) as e:
        raise RuntimeError("%s: %s (HDF5 creates no dataset with a mandatory filter it cannot "
                           "find: put libh5z_fzd.so's folder on HDF5_PLUGIN_PATH)"
                           % (src.name, e)) from e
    for i in range(src.id.get_num_chunks()):
        info = src.id.get_chunk_info(i)
        mask, data = src.id.read_direct_chunk(info.chunk_offset)
        dst.write_direct_chunk(info.chunk_offset, data, mask)
    _copy_attrs(src, h5py.Dataset(dst))
    return src.id.get_num_chunks()


def migrate(src_path, dst_path=None, log=None):
    """Copies the file at src_path to dst_path (src_path itself when None,
    through a temporary file renamed over it) with every dataset that uses
    filter 305 as fzd did set to FILTER_ID; the stored chunks are copied
    as they are.  Returns the names of the datasets rewritten."""
    import h5py
    in_place = dst_path is None
    out_path = src_path + ".fzd-migrate.tmp" if in_place else dst_path
    if not in_place and os.path.abspath(src_path) == os.path.abspath(dst_path):
        raise ValueError("give another output file, or none to rewrite in place")
    done = []
    seen = {}
    try:
        with h5py.File(src_path, "r") as fin, h5py.File(out_path, "w") as fout:
            def walk(gin, gout):
                _copy_attrs(gin, gout)
                for name in gin:
                    link = gin.get(name, getlink=True)
                    if isinstance(link, h5py.SoftLink):
                        gout[name] = h5py.SoftLink(link.path)
                        continue
                    if isinstance(link, h5py.ExternalLink):
                        gout[name] = h5py.ExternalLink(link.filename, link.path)
                        continue
                    obj = gin[name]
                    addr = h5py.h5o.get_info(obj.id).addr
                    if addr in seen:  # a second hard link to one object
                        gout[name] = fout[seen[addr]]
                        continue
                    if isinstance(obj, h5py.Group):
                        walk(obj, gout.create_group(name))
                    elif isinstance(obj, h5py.Dataset) and obj.chunks and _is_fzd_legacy(obj):
                        n = _migrate_dataset(obj, gout, name)
                        done.append(obj.name)
                        if log:
                            log("%s: %d chunks copied, filter %d -> %d"
                                % (obj.name, n, LEGACY_FILTER_ID, FILTER_ID))
                    else:
                        fin.copy(obj, gout, name)
                    seen[addr] = gout[name].name
            walk(fin, fout)
        if in_place:
            os.replace(out_path, src_path)
    except BaseException:
        if in_place and os.path.exists(out_path):
            os.unlink(out_path)
        raise
    return done


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 3) or argv[0] != "migrate":
        sys.stderr.write("usage: python3 -m fzd.h5 migrate IN.h5 [OUT.h5]\n"
                         "  rewrites the datasets of IN.h5 written with filter id %d to %d,\n"
                         "  copying the stored chunks as they are; into OUT.h5, or IN.h5\n"
                         "  in place\n" % (LEGACY_FILTER_ID, FILTER_ID))
        return 2
    try:
        done = migrate(argv[1], argv[2] if len(argv) == 3 else None,
                       log=lambda s: print(s))
    except (OSError, RuntimeError, ValueError) as e:
        sys.stderr.write("fzd.h5 migrate: %s\n" % e)
        return 1
    print("%d dataset(s) moved to filter %d" % (len(done), FILTER_ID))
    return 0


if __name__ == "__main__":
    sys.exit(main())
