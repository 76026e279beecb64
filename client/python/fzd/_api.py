"""fzd.compress and fzd.decompress: a daemon when one answers, else the
engine in this process.

A daemon is the fast path (a GPU, warm plans, one pool of workers for many
processes); the engine here (_engine.py) makes the same archive byte for
byte as a CPU daemon and reads anything a daemon wrote, so no data ever
needs a daemon to be read.  ``local=None`` picks: the daemon at ``address``
(default_address()) when it accepts a connection, else the engine;
``local=True`` always runs the engine, ``local=False`` requires the daemon
(fzd.Error ECONNREFUSED otherwise).  Each thread of each process keeps its
own connection, opened at first use; when no daemon answers the next call
tries again, so a daemon started later is used from then on.
"""
import os
import threading

import numpy as np

from . import _archive, _engine
from ._client import Client, _host_view, _is_device
from ._errors import Error, error

_state = threading.local()

# A daemon that cannot be reached (nothing listens, no socket file, no
# permission on it) sends the call to the engine here; any other failure is
# the daemon's answer and is raised.
_UNREACHABLE = ("ECONNREFUSED", "EACCES")
# A connection that broke during a call: dropped, and the call runs again
# (on a fresh connection or here; compression is a pure function).
_BROKEN = ("ECONNRESET", "EPIPE", "ETIMEDOUT", "EPROTO")


def _connection(address, required):
    """This thread's client of the daemon at address, or None when it
    cannot be reached and required is false."""
    conns = getattr(_state, "conns", None)
    if conns is None or _state.pid != os.getpid():
        _state.conns = conns = {}  # a forked child opens its own
        _state.pid = os.getpid()
    c = conns.get(address)
    if c is not None and c._sock is not None:
        return c
    try:
        c = Client(address)
    except Error as e:
        if e.name in _UNREACHABLE and not required:
            return None
        raise
    conns[address] = c
    return c


def _via_daemon(local, address, needs_daemon, fn):
    """fn(client) on the daemon, or None when the engine here should run."""
    if local and needs_daemon:
        raise error("EINVAL", "local=True, but device arrays need a daemon on the GPU backend")
    if local:
        return None
    required = local is False or needs_daemon
    for attempt in (0, 1):
        c = _connection(address, required)
        if c is None:
            return None
        try:
            return (fn(c),)
        except Error as e:
            if e.name not in _BROKEN or c._sock is not None or attempt:
                raise
            c.close()
    return None


def compress(array, pipeline=None, eb=0, mode="rel", fill_value=None, local=None,
             address=None):
    """The archive (bytes) of a numpy array (or anything np.asarray takes;
    a device array through a GPU daemon).  ``pipeline`` (a preset or a
    chain; None: "balanced"), ``eb``, ``mode`` and ``fill_value`` mean what
    they mean to Client.compress.  ``local``: None uses a daemon when one
    answers at ``address`` (None: default_address()), else the engine in
    this process; True always the engine; False always a daemon."""
    dev = _is_device(array)
    r = _via_daemon(local, address, dev, lambda c: c.compress(
        array, pipeline=pipeline, eb=eb, mode=mode, fill_value=fill_value))
    if r is not None:
        return r[0]
    a, _ = _host_view(array)
    return _engine.compress(a, pipeline, eb, mode, fill_value)


def decompress(archive, out=None, local=None, address=None):
    """The array an archive holds (its dtype and shape), or the archive
    decoded into ``out``, which is returned.  ``out`` is checked against the
    archive's header before anything is decoded: its dtype must be the
    archive's (fzd.Error EDTYPE, even where the byte counts agree) and its
    element count too (ENOSPC, ESHAPE), with the archive's shape or flat;
    an untyped byte buffer takes the raw bytes.  ``local`` and ``address``
    as for compress()."""
    dev = _is_device(archive) or _is_device(out)
    r = _via_daemon(local, address, dev, lambda c: c.decompress(archive, out=out))
    if r is not None:
        return r[0]
    view = memoryview(archive).cast("B")
    dtype, shape, raw = _engine.header(view)
    if out is None:
        dst = np.empty(shape, dtype)
        _engine.decompress_into(view, dst)
        return dst
    dst = _archive.check_out(out, dtype, shape, raw)
    if dst is None:
        tmp = np.empty(shape, dtype)
        _engine.decompress_into(view, tmp)
        np.copyto(np.asarray(out), tmp.reshape(np.shape(out)), casting="equiv")
        return out
    _engine.decompress_into(view, dst)
    return out


def engine_available():
    """True when the engine library loads in this process (fzd can then
    read and write with no daemon)."""
    return _engine.available()
