"""The engine in this process: libfzengine loaded with ctypes.

fzd reads and writes without a daemon through the same C engine the daemon
runs (engine/, with the flat calls of client/python/src/fzflat.h), so an
archive made here is byte for byte the one a CPU daemon makes, and anything
a daemon wrote decodes here.  The library is looked up, first found wins:

1. $FZD_ENGINE_LIB, a path (the tests point it at the build's library);
2. fzd/_libfzengine*.so inside this package (built by setup.py when the
   package is installed with pip);
3. the system's libfzengine.so.N (N the major version: ``cmake --install``).

Every call checks dtype, shape and sizes before the engine runs; the engine
checks the archive again, and a bad one raises fzd.Error (ECORRUPT...).
ctypes releases the GIL during each call, so threads compress in parallel.
"""
import ctypes
import glob
import os
import threading

import numpy as np

from ._archive import DTYPES
from ._errors import Error, error
from ._version import __version__

_MAX_DIMS = 4
_MODES = {"abs": 0, "rel": 1, "pwrel": 2}
_CODES = {np.dtype(npd): code for code, (_, npd) in DTYPES.items()}

_lock = threading.Lock()
_lib = None
_lib_error = None


def _candidates():
    env = os.environ.get("FZD_ENGINE_LIB")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "_libfzengine*.so")))
    major = __version__.split(".")[0]
    return found + ["libfzengine.so.%s" % major], False


def _bind(lib):
    c = ctypes
    sigs = {
        "fz_version": (c.c_uint, []),
        "fz_err_name": (c.c_char_p, [c.c_int]),
        "fz_strerror": (c.c_char_p, [c.c_int]),
        "fzflat_plan_create": (c.c_int, [c.c_int, c.c_uint, c.POINTER(c.c_uint64), c.c_char_p,
                                         c.c_double, c.c_int, c.c_int, c.c_double, c.c_uint,
                                         c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]),
        "fzflat_inspect": (c.c_int, [c.c_void_p, c.c_size_t, c.POINTER(c.c_int),
                                     c.POINTER(c.c_uint), c.POINTER(c.c_uint64),
                                     c.POINTER(c.c_uint64)]),
        "fz_plan_destroy": (None, [c.c_void_p]),
        "fz_plan_compress_bound": (c.c_size_t, [c.c_void_p]),
        "fz_plan_compress": (c.c_int, [c.c_void_p, c.c_void_p, c.c_size_t, c.c_void_p,
                                       c.c_size_t, c.POINTER(c.c_size_t)]),
        "fz_plan_error": (c.c_char_p, [c.c_void_p]),
        "fz_decompress": (c.c_int, [c.c_void_p, c.c_size_t, c.c_void_p, c.c_size_t,
                                    c.POINTER(c.c_size_t), c.c_uint]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    want = tuple(int(x) for x in __version__.split("."))
    v = lib.fz_version()
    have = (v >> 16, (v >> 8) & 0xFF, v & 0xFF)
    if have[0] != want[0]:
        raise OSError("it is engine version %d.%d.%d, this package needs %d.x"
                      % (have + (want[0],)))
    return lib


def library():
    """The loaded engine (a ctypes.CDLL), or fzd.Error ENOSYS saying where
    it looked and why each place failed."""
    global _lib, _lib_error
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        if _lib_error is not None:
            raise _lib_error
        names, forced = _candidates()
        tried = []
        for name in names:
            try:
                _lib = _bind(ctypes.CDLL(name))
                return _lib
            except (OSError, AttributeError) as e:
                tried.append("%s: %s" % (name, e))
        _lib_error = error("ENOSYS", "no fzd engine library to run in this process (%s)%s"
                           % ("; ".join(tried), "" if forced else
                              "; install the package with pip, or set FZD_ENGINE_LIB to a "
                              "libfzengine.so"))
        raise _lib_error


def available():
    """True when the engine library loads here."""
    try:
        library()
        return True
    except Error:
        return False


def _fail(lib, rc, why=b""):
    name = (lib.fz_err_name(rc) or b"EIO").decode()
    text = why.decode(errors="replace") if why else (lib.fz_strerror(rc) or b"").decode()
    return Error(name, rc, text)


def _threads():
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 16))


def header(view):
    """(numpy dtype, shape, raw bytes) of the archive in the byte view,
    validated by the engine as it validates before decoding; the payload is
    not read."""
    lib = library()
    a = np.frombuffer(view, np.uint8)
    dims = (ctypes.c_uint64 * _MAX_DIMS)()
    dcode, nd, raw = ctypes.c_int(), ctypes.c_uint(), ctypes.c_uint64()
    rc = lib.fzflat_inspect(a.ctypes.data, a.nbytes, ctypes.byref(dcode), ctypes.byref(nd),
                            dims, ctypes.byref(raw))
    if rc < 0:
        raise _fail(lib, rc)
    return np.dtype(DTYPES[dcode.value][1]), tuple(dims[:nd.value]), raw.value


def compress(a, pipeline=None, eb=0, mode="rel", fill_value=None):
    """The archive (bytes) of the contiguous little-endian array a, made by
    the engine here, with the daemon's meaning of every argument."""
    lib = library()
    code = _CODES.get(a.dtype)
    if code is None:
        raise error("EDTYPE", "numpy dtype %s has no fzd dtype (u8..u64, i8..i64, f32, f64)"
                    % a.dtype)
    if a.ndim > _MAX_DIMS:
        raise error("ESHAPE", "shape %r has %d dimensions; 1 to %d are supported"
                    % (a.shape, a.ndim, _MAX_DIMS))
    if a.size == 0:
        raise error("ESHAPE", "shape %r holds no element" % (a.shape,))
    shape = a.shape or (1,)
    dims = (ctypes.c_uint64 * _MAX_DIMS)(*shape)
    eb = float(eb or 0)
    m = _MODES.get(mode if eb else "rel")
    if m is None:
        raise error("EBOUND", "unknown error-bound mode '%s' (abs, rel or pwrel)" % (mode,))
    has_fill = fill_value is not None
    why = ctypes.create_string_buffer(512)
    plan = ctypes.c_void_p()
    rc = lib.fzflat_plan_create(code, len(shape), dims,
                                None if pipeline is None else str(pipeline).encode(),
                                eb, m, int(has_fill), float(fill_value) if has_fill else 0.0,
                                _threads(), ctypes.byref(plan), why, len(why))
    if rc < 0:
        raise _fail(lib, rc, why.value)
    try:
        cap = lib.fz_plan_compress_bound(plan)
        out = np.empty(cap, np.uint8)
        n = ctypes.c_size_t()
        rc = lib.fz_plan_compress(plan, a.ctypes.data, a.nbytes, out.ctypes.data, cap,
                                  ctypes.byref(n))
        if rc < 0:
            raise _fail(lib, rc, lib.fz_plan_error(plan))
        return out[:n.value].tobytes()
    finally:
        lib.fz_plan_destroy(plan)


def decompress_into(view, dst):
    """Decodes the archive in the byte view into dst, a writable contiguous
    numpy array whose byte count the caller has checked against the header."""
    lib = library()
    a = np.frombuffer(view, np.uint8)
    n = ctypes.c_size_t()
    rc = lib.fz_decompress(a.ctypes.data, a.nbytes, dst.ctypes.data, dst.nbytes,
                           ctypes.byref(n), _threads())
    if rc < 0:
        raise _fail(lib, rc)
    return n.value
