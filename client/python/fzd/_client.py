"""The connection to fzd: the handshake, requests, and where the data goes.

A Client holds one connection (Unix socket or TCP) and speaks the
msgpack-RPC protocol of docs/protocol.md: ``hello`` first, then requests
``[0, msgid, method, params]`` whose responses ``[1, msgid, error,
result]`` are matched by msgid, so several jobs can be in flight at once
(compress_many / decompress_many).

Where the bytes travel, as libfzclient does it:

* On the Unix socket, an input of ``memfd_threshold`` bytes or more (256 KiB
  by default), or any input over the daemon's ``max_inline``, is copied once
  into one of the client's memfds (sealed against shrinking, kept across
  jobs, so the daemon maps it once per connection and later jobs reuse the
  mapping) and passed with SCM_RIGHTS (socket.send_fds): its bytes never
  cross the socket.
* A result that may be that large comes back the same way: the client
  passes a memfd of its own as ``out_fd``; the daemon writes the result
  there and truncates the file to its length; the client reads it back (a
  decompressed array is the memfd's pages mapped, not a copy).
* Over TCP everything is inline, up to ``max_inline`` (the daemon refuses
  more with EMSGSIZE; the client refuses before sending).
* Device arrays (``__cuda_array_interface__``) travel as CUDA IPC handles
  (_cuda.py) when the daemon runs the GPU backend.
"""
import fcntl
import mmap
import os
import socket
import threading
import time
import weakref

import msgpack
import numpy as np

from . import _archive
from ._errors import Error, error

DEFAULT_SOCKET = "/run/fzd/fzd.sock"
PROTOCOL_VERSION = 1
MEMFD_THRESHOLD = 256 << 10  # as libfzclient: smaller inputs go inline
_MEMFD_SLOTS = 8
_BUSY_RETRIES = 100

# numpy dtype -> fzd's name; byte order is fixed to little-endian on the way
_NAMES = {np.dtype(v): k for k, v in
          (("u8", "<u1"), ("i8", "<i1"), ("u16", "<u2"), ("i16", "<i2"),
           ("u32", "<u4"), ("i32", "<i4"), ("u64", "<u8"), ("i64", "<i8"),
           ("f32", "<f4"), ("f64", "<f8"))}
_DTYPES = {k: v for v, k in _NAMES.items()}


# The launchers' names for the node-local rank, in libfzclient's order:
# Open MPI, MPICH and Intel MPI, Slurm, PMIx-based ones.
_LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                    "PMIX_LOCAL_RANK", "PMI_LOCAL_RANK")


def expand_address(template):
    """An address with "%l" replaced by the node-local rank (modulo
    $FZD_DAEMONS_PER_NODE) and "%%" by "%", as libfzclient does it, so
    that each MPI rank reaches the fzd of its GPU."""
    out = []
    i = 0
    while i < len(template):
        ch = template[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        nxt = template[i + 1:i + 2]
        if nxt == "%":
            out.append("%")
        elif nxt == "l":
            name = next((v for v in _LOCAL_RANK_VARS if v in os.environ), None)
            if name is None:
                raise error("EINVAL", "the address has %%l but no launcher said the local rank "
                            "(%s are unset)" % ", ".join(_LOCAL_RANK_VARS))
            text = os.environ[name]
            if not text.isdigit():
                raise error("EINVAL", "%s is '%s', not a local rank" % (name, text))
            rank = int(text)
            per = os.environ.get("FZD_DAEMONS_PER_NODE")
            if per is not None:
                if not per.isdigit() or int(per) == 0:
                    raise error("EINVAL", "FZD_DAEMONS_PER_NODE is '%s', not a positive number"
                                % per)
                rank %= int(per)
            out.append(str(rank))
        else:
            raise error("EINVAL", "address '%s': '%%%s' is not %%l or %%%%"
                        % (template, nxt or " "))
        i += 2
    return "".join(out)


def default_address():
    """Where a client looks when given no address, as fzd and libfzclient
    do: $FZD_SOCKET when set; else /run/fzd/fzd.sock (a system fzd) when it
    exists; else $XDG_RUNTIME_DIR/fzd/fzd.sock (a user's own fzd) when it
    exists; else /run/fzd/fzd.sock, which the error then names."""
    env = os.environ.get("FZD_SOCKET")
    if env:
        return env
    if os.path.exists(DEFAULT_SOCKET):
        return DEFAULT_SOCKET
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        user = os.path.join(xdg, "fzd", "fzd.sock")
        if os.path.exists(user):
            return user
    return DEFAULT_SOCKET


def dtype_name(dt):
    """fzd's name of a numpy dtype ("f32"), or Error EDTYPE."""
    dt = np.dtype(dt)
    le = dt.newbyteorder("<") if dt.byteorder == ">" else dt
    name = _NAMES.get(le)
    if name is None:
        raise error("EDTYPE", "numpy dtype %s has no fzd dtype (u8..u64, i8..i64, f32, f64)"
                    % dt)
    return name


def compress_bound(nbytes, shape=None):
    """An upper bound on the archive of nbytes of input: chunks never grow,
    and the header is at most a few hundred bytes plus two bytes per chunk
    of 4 KiB (the smallest chunk size)."""
    return nbytes + 2 * (nbytes // 4096 + 1) + 1024


def _pread_into(fd, view, offset=0):
    """Fills the writable byte view from fd at offset (pread may be short)."""
    done = 0
    n = len(view)
    while done < n:
        k = os.preadv(fd, [view[done:done + (1 << 30)]], offset + done)
        if k <= 0:
            raise error("EIO", "the result memfd ended after %d of %d bytes" % (done, n))
        done += k


_PARALLEL_COPY = 64 << 20


def _copy(dst, view, n):
    """dst[:n] = view, by several threads for large copies (numpy's copy
    releases the GIL): a copy of 1 GiB is memory-bound, and one core does
    not saturate the memory bus."""
    if n < _PARALLEL_COPY:
        dst[0:n] = view
        return
    d = np.frombuffer(dst, np.uint8, n)
    s = np.frombuffer(view, np.uint8, n)
    parts = max(1, min(4, os.cpu_count() or 1))
    step = -(-n // parts)
    threads = [threading.Thread(target=np.copyto, args=(d[i:i + step], s[i:i + step]))
               for i in range(step, n, step)]
    for t in threads:
        t.start()
    np.copyto(d[:step], s[:step])
    for t in threads:
        t.join()
    del d, s  # no export of the map may outlive the copy (mmap.close)


class _Buffer:
    """A shared buffer: a memfd sealed at its size, mapped here; arrays in
    it travel as (descriptor, offset), with no copy."""

    def __init__(self, nbytes):
        self.fd = os.memfd_create("fzd-python-buffer", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, nbytes)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            self.map = mmap.mmap(self.fd, nbytes, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            raise
        self.size = nbytes
        self.base = None

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _drop_buffer(client_ref, buf):
    """The last view of a shared buffer is gone: forget it, close its fd."""
    client = client_ref()
    if client is not None and client._buffers.get(buf.base) is buf:
        del client._buffers[buf.base]
    buf.close()


class _Slot:
    """A memfd of the client's for inputs, sealed against shrinking."""

    def __init__(self):
        self.fd = os.memfd_create("fzd-python-input",
                                  os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        self.size = 0
        self.map = None
        self.busy = False

    def fill(self, view):
        n = len(view)
        if self.size < n:
            # Grown, never shrunk (the seal): the daemon may map the old size.
            if self.map is not None:
                self.map.close()
                self.map = None
            os.ftruncate(self.fd, n)
            self.size = n
        if self.map is None:
            self.map = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        _copy(self.map, view, n)

    def close(self):
        if self.map is not None:
            self.map.close()
        os.close(self.fd)


class _Job:
    __slots__ = ("op", "params", "fds", "slot", "out_fd", "out_keep", "out", "out_user",
                 "device_out",
                 "msgid", "result", "error", "done", "tries")

    def __init__(self, op, params):
        self.op = op
        self.params = params
        self.fds = []
        self.slot = None
        self.out_fd = None
        self.out_keep = False  # the result memfd goes back to the client's pool
        self.out = None
        self.out_user = None  # decompress: the caller's out, when job.out views it
        self.device_out = None
        self.msgid = None
        self.result = None
        self.error = None
        self.done = False
        self.tries = 0


def _host_view(arr):
    """A contiguous little-endian numpy array and its bytes, for an array-like."""
    a = np.asarray(arr)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    a = np.ascontiguousarray(a)
    if a.ndim == 0:
        a = a.reshape(1)
    return a, memoryview(a).cast("B")


def _is_device(obj):
    return hasattr(obj, "__cuda_array_interface__")


class Client:
    """A connection to fzd.

    ``address``: "unix:PATH", "tcp:HOST:PORT" (IPv6 in brackets) or a plain
    path, where "%l" is the node-local rank (as libfzclient: one daemon per
    GPU); None is default_address(): $FZD_SOCKET, else /run/fzd/fzd.sock
    or $XDG_RUNTIME_DIR/fzd/fzd.sock, whichever exists.  ``token``: for TCP
    daemons that require one (default $FZD_TOKEN).  ``timeout``: seconds for
    connecting and for each answer (None: wait forever).  A Client is not
    thread-safe: use one per thread.  It is a context manager.
    """

    def __init__(self, address=None, token=None, timeout=None, name="fzd-python",
                 memfd_threshold=MEMFD_THRESHOLD):
        if address is None:
            address = default_address()
        if token is None:
            token = os.environ.get("FZD_TOKEN") or None
        address = expand_address(address)
        self.address = address
        self.memfd_threshold = memfd_threshold
        self.last_result = None  # the daemon's result map of the last job
        self.bytes_sent = 0      # bytes written to the socket (messages only)
        self.fds_sent = 0        # descriptors passed with SCM_RIGHTS
        self._sock = None
        self._slots = []
        self._buffers = {}
        self._out_free = []  # result memfds whose pages are kept for the next result
        self._msgid = 0
        self._pending = {}
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=(4 << 30) + (1 << 20))
        self._cuda = None
        self._sock, self.transport = self._dial(address, timeout)
        try:
            params = {"version": PROTOCOL_VERSION, "client": name}
            if token and self.transport == "tcp":
                params["token"] = token
            hello = self.call("hello", params)
            if hello.get("version") != PROTOCOL_VERSION:
                raise error("EVERSION", "the server speaks protocol version %r, not %d"
                            % (hello.get("version"), PROTOCOL_VERSION))
        except BaseException:
            self.close()
            raise
        self.server_info = hello
        self.server = hello.get("server", "")
        self.backend = hello.get("backend", "")
        self.device = hello.get("device", "")
        self.max_inline = int(hello.get("max_inline") or 0)
        self.max_message = int(hello.get("max_message") or 0)
        self.pid = hello.get("pid")

    # ---- the connection ----------------------------------------------------

    @staticmethod
    def _dial(address, timeout):
        if address.startswith("tcp:"):
            hostport = address[4:]
            if hostport.startswith("["):
                end = hostport.find("]")
                host, rest = hostport[1:end], hostport[end + 1:]
                ok = end > 1 and rest.startswith(":")
                port = rest[1:]
            else:
                host, _, port = hostport.rpartition(":")
                ok = bool(host)
            if not ok or not port.isdigit():
                raise error("EINVAL", "malformed TCP address '%s' (expected tcp:HOST:PORT)"
                            % address)
            try:
                s = socket.create_connection((host, int(port)), timeout=timeout)
            except OSError as e:
                raise error("ECONNREFUSED", "cannot connect to '%s': %s" % (hostport, e)) from None
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(timeout)
            return s, "tcp"
        path = address[5:] if address.startswith("unix:") else address
        if not path or len(path.encode()) > 107:
            raise error("EINVAL", "invalid socket path '%s' (empty or over 107 bytes)" % path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(path)
        except OSError as e:
            s.close()
            name = "EACCES" if isinstance(e, PermissionError) else "ECONNREFUSED"
            raise error(name, "cannot connect to '%s': %s (is fzd running? start it with "
                        "'fzd' or 'systemctl start fzd', or point FZD_SOCKET at one)"
                        % (path, e.strerror or e)) from None
        return s, "unix"

    def close(self):
        """Closes the connection and frees the client's memfds."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for s in self._slots:
            s.close()
        self._slots = []
        for b in list(self._buffers.values()):
            b.close()
        self._buffers.clear()
        for fd in self._out_free:
            os.close(fd)
        self._out_free = []
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _broken(self, err):
        """Fails every job in flight with err and closes the connection."""
        for job in self._pending.values():
            job.error = err
            job.done = True
            self._free(job)
        self._pending.clear()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        return err

    def _send(self, job):
        if self._sock is None:
            raise error("ECONNRESET", "the connection is closed")
        self._msgid = self._msgid % 0xFFFFFFFF + 1
        job.msgid = self._msgid
        params = dict(job.params)
        fds = list(job.fds)
        if job.out_fd is not None:
            params["out_fd"] = len(fds)
            fds.append(job.out_fd)
        if fds:
            params["nfds"] = len(fds)
        msg = msgpack.packb([0, job.msgid, job.op, params], use_bin_type=True)
        self._pending[job.msgid] = job
        try:
            if fds:
                n = socket.send_fds(self._sock, [msg[:4096]], fds)
                self.fds_sent += len(fds)
                self._sock.sendall(memoryview(msg)[n:])
            else:
                self._sock.sendall(msg)
        except socket.timeout:
            raise self._broken(error("ETIMEDOUT", "sending a request timed out")) from None
        except OSError as e:
            raise self._broken(error("ECONNRESET", "sending a request: %s" % e)) from None
        self.bytes_sent += len(msg)

    def _read_one(self):
        """Reads until one response arrives and records it on its job."""
        while True:
            for msg in self._unpacker:
                self._dispatch(msg)
                return
            try:
                data = self._sock.recv(1 << 20)
            except socket.timeout:
                raise error("ETIMEDOUT", "no answer from fzd within the timeout") from None
            except OSError as e:
                raise self._broken(error("ECONNRESET", "reading an answer: %s" % e)) from None
            if not data:
                raise self._broken(error("ECONNRESET", "fzd closed the connection"))
            self._unpacker.feed(data)

    def _dispatch(self, msg):
        if not (isinstance(msg, list) and len(msg) == 4 and msg[0] == 1):
            raise self._broken(error("EPROTO", "not a msgpack-RPC response: %.200r" % (msg,)))
        _, msgid, err, result = msg
        job = self._pending.pop(msgid, None)
        if job is None:
            # msgid 0 (or unknown): a fault of the whole connection.
            raise self._broken(Error.from_wire(err) if err is not None else
                               error("EPROTO", "an answer to msgid %r, never sent" % (msgid,)))
        if err is not None:
            job.error = Error.from_wire(err)
        elif not isinstance(result, dict):
            job.error = error("EPROTO", "a result that is not a map: %.200r" % (result,))
        else:
            job.result = result
        job.done = True

    def _wait(self, job):
        while not job.done:
            self._read_one()

    def call(self, method, params=None):
        """One request, waiting for its answer: the result map, or Error."""
        job = _Job(method, params or {})
        self._send(job)
        self._wait(job)
        if job.error is not None:
            raise job.error
        return job.result

    def ping(self):
        return self.call("ping")["time_ns"]

    def status(self):
        return self.call("status")

    def stats(self):
        return self.call("stats")

    def presets(self):
        return self.call("presets")["presets"]

    # ---- detector frames (fzd.frames) -------------------------------------------

    def frames_setup(self, shape, mask=None, csr=None):
        """Uploads a mask (one byte a pixel, nonzero: used) and/or a CSR
        matrix (scipy.sparse or (indptr, indices, weights); integer weights
        give exact int64 sums) once; returns the id that frames(setup=)
        takes on this connection until it closes."""
        from . import frames as _frames
        shape = tuple(int(x) for x in (shape if np.ndim(shape) else (shape,)))
        npix = int(np.prod(shape))
        params = {"shape": [npix]}
        if mask is not None:
            params["mask"] = np.ascontiguousarray(mask, dtype=np.uint8).reshape(-1).tobytes()
        wint = False
        if csr is not None:
            indptr, indices, weights = _frames.csr_arrays(csr, npix)
            wint = weights.dtype == np.int32
            params["csr"] = {"indptr": indptr.astype("<u8").tobytes(),
                             "indices": indices.astype("<u4").tobytes(),
                             "weights": weights.astype(weights.dtype.newbyteorder("<")).tobytes(),
                             "weights_dtype": "i32" if wint else "f32"}
        sid = self.call("frames_setup", params)["id"]
        if not hasattr(self, "_frames_setups"):
            self._frames_setups = {}
        # What reading its sums needs: integer weights, and the rows.
        self._frames_setups[sid] = (wint, len(indptr) - 1 if csr is not None else 0)
        return sid

    def frames(self, chunks, shape=None, dtype=None, codec=None, cut=0.0, top_n=0,
               dense=False, setup=None):
        """Decodes detector chunks on the daemon: a list of bytes-like
        chunks with the frame shape and dtype, or an h5py dataset chunked
        one frame a chunk.  Returns a list of fzd.frames.Frame, one a chunk
        (a corrupt chunk fails its own frame: its status and error).
        codec None: the dataset's own (its filter's parameters), LZ4 for
        raw chunks."""
        from . import frames as _frames
        codec = _frames.resolve_codec(chunks, codec)
        table = None
        if self.transport == "unix" and hasattr(chunks, "id") and hasattr(chunks, "file"):
            # An h5py dataset on a Unix socket: the file itself goes as a
            # descriptor with its chunk table, and fzd reads the chunks.
            table = _frames.chunk_table(chunks)
            shape = tuple(chunks.shape[1:])
            dt = np.dtype(dtype if dtype is not None else chunks.dtype).newbyteorder("<")
            path = chunks.file.filename
            chunks = [None] * len(table)
        else:
            chunks, shape, dt = _frames.normalize(chunks, shape, dtype)
        params = {"dtype": _frames._NAMES[dt], "shape": list(shape), "codec": codec,
                  "cut": float(cut), "top_n": int(top_n),
                  "output": "dense" if dense else "sparse"}
        pdt, rows = np.float64, 0
        if setup is not None:
            params["setup"] = int(setup)
            wint, rows = getattr(self, "_frames_setups", {}).get(setup, (False, 0))
            pdt = np.int64 if wint else np.float64
        # Dense frames on a Unix socket come back through a memfd, not in
        # the reply, which holds at most max_inline_bytes (64 MiB by
        # default: seven Eiger 4M frames); up to 256 MiB of them a call.
        via_fd = dense and self.transport == "unix"
        n = len(table) if table is not None else len(chunks)
        step = 4096
        if via_fd:
            room = -(-int(np.prod(shape)) * dt.itemsize // 8) * 8 + rows * 8
            step = max(1, min(step, (256 << 20) // room))
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if table is not None else None
        out = []
        try:
            for at in range(0, n, step):
                p = dict(params)
                if table is None:
                    p["chunks"] = chunks[at:at + step]
                else:
                    part = table[at:at + step]
                    p.update(in_fd=0, offsets=[o for o, _ in part], lengths=[k for _, k in part])
                job = _Job("frames", p)
                job.fds = [fd] if fd is not None else []
                if via_fd:
                    job.out_fd = os.memfd_create("fzd-frames", os.MFD_CLOEXEC)
                try:
                    self._send(job)
                    self._wait(job)
                    if job.error is not None:
                        raise job.error
                    if not via_fd:
                        out += _frames.from_reply(job.result, shape, dt, dense, pdt)
                        continue
                    size = job.result["bytes"]
                    buf = os.pread(job.out_fd, size, 0) if size else b""
                    if len(buf) != size:
                        raise error("EIO", "the frames' memfd holds %d bytes, not %d"
                                    % (len(buf), size))
                    out += _frames.from_reply(job.result, shape, dt, dense, pdt, buf)
                finally:
                    if job.out_fd is not None:
                        os.close(job.out_fd)
        finally:
            if fd is not None:
                os.close(fd)
        return out

    # ---- memfds --------------------------------------------------------------

    def _stage(self, view):
        """A memfd slot holding the bytes of view, or None when all are busy."""
        slot = None
        for s in self._slots:
            if not s.busy and s.size >= len(view):
                slot = s
                break
        if slot is None:
            for s in self._slots:
                if not s.busy:
                    slot = s
                    break
        if slot is None and len(self._slots) < _MEMFD_SLOTS:
            slot = _Slot()
            self._slots.append(slot)
        if slot is None:
            return None
        slot.fill(view)
        slot.busy = True
        return slot

    def _free(self, job):
        if job.slot is not None:
            job.slot.busy = False
            job.slot = None
        if job.out_fd is not None:
            if job.out_keep and len(self._out_free) < 2 and self._sock is not None:
                self._out_free.append(job.out_fd)
            else:
                os.close(job.out_fd)
            job.out_fd = None

    def empty(self, shape, dtype=np.float32):
        """A new numpy array (zeroed) in shared memory of this client: a
        memfd sealed at its size and mapped in both processes.  Compressing
        it (or any C-contiguous array inside it) sends the descriptor and
        the offset, with no copy at all: fill it in place, step after step.
        The memory is freed when the array (and every view of it) is gone
        and the daemon has let go of its mapping (at the latest when the
        connection closes).  Over TCP it is an ordinary array."""
        dt = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = int(np.prod(shape, dtype=np.uint64))
        if self.transport != "unix" or count == 0:
            return np.zeros(shape, dt)
        buf = _Buffer(count * dt.itemsize)
        flat = np.frombuffer(buf.map, dtype=dt, count=count)
        buf.base = flat.__array_interface__["data"][0]
        self._buffers[buf.base] = buf
        weakref.finalize(flat, _drop_buffer, weakref.ref(self), buf)
        return flat.reshape(shape)

    zeros = empty  # a fresh memfd reads as zeros

    def _shared(self, addr, n):
        for b in self._buffers.values():
            if b.base <= addr and addr + n <= b.base + b.size:
                return b
        return None

    def _input(self, job, view, key="data", arr=None):
        """Puts a host input on the job: a shared buffer's descriptor, a
        memfd slot, or inline."""
        n = len(view)
        if arr is not None and self._buffers and self.transport == "unix":
            addr = arr.__array_interface__["data"][0]
            b = self._shared(addr, n)
            if b is not None:
                job.params["in_fd"] = len(job.fds)
                job.params["in_offset"] = addr - b.base
                job.params["in_length"] = n
                job.fds.append(b.fd)
                return
        if self.transport == "unix" and (n >= self.memfd_threshold or
                                         (self.max_inline and n > self.max_inline)):
            slot = self._stage(view)
            if slot is not None:
                job.slot = slot
                job.params["in_fd"] = len(job.fds)
                job.params["in_length"] = n
                job.fds.append(slot.fd)
                return
        if self.max_inline and n > self.max_inline:
            raise error("EMSGSIZE", "inline input of %d bytes exceeds the server's max_inline "
                        "of %d bytes%s" % (n, self.max_inline,
                                           " (over TCP data travels inline only)"
                                           if self.transport == "tcp" else ""))
        job.params[key] = view

    def _output(self, job, result_bound, out):
        """Chooses where the result goes: a memfd of ours when it may be
        large (or must be: over max_inline), else inline."""
        big = result_bound >= self.memfd_threshold or (
            self.max_inline and result_bound > self.max_inline)
        if self.transport == "unix" and big:
            # A result that is copied out of the memfd (an archive, or an
            # array into the caller's out) leaves it free for the next one,
            # whose pages are then already there; a decompressed array that
            # is the memfd's pages mapped keeps it.
            job.out_keep = job.op == "compress" or job.out is not None
            if job.out_keep and self._out_free:
                job.out_fd = self._out_free.pop()
            else:
                job.out_fd = os.memfd_create("fzd-python-output", os.MFD_CLOEXEC)
            if out is not None:
                job.params["out_length"] = len(out)

    # ---- jobs ----------------------------------------------------------------

    def _compress_job(self, array, pipeline, eb, mode, fill_value, verify, out):
        params = {}
        if pipeline is not None:
            params["pipeline"] = pipeline
        if eb:
            # The mode goes with a bound only: a chain that names its own
            # (quant(eb=...,mode=abs)) is not contradicted by the default.
            params["eb"] = float(eb)
            if mode is not None:
                params["mode"] = mode
        if fill_value is not None:
            params["fill_value"] = float(fill_value)
        if verify:
            params["verify"] = True
        job = _Job("compress", params)
        outview = None
        if out is not None and not _is_device(out):
            outview = memoryview(out).cast("B")
            if outview.readonly:
                raise error("EINVAL", "out is a read-only buffer")
        job.out = outview
        if _is_device(array) or _is_device(out):
            self._cuda_job(job, array, out, "compress")
            return job
        a, view = _host_view(array)
        params["dtype"] = dtype_name(a.dtype)
        params["shape"] = list(a.shape)
        self._input(job, view, arr=a)
        self._output(job, compress_bound(len(view)), outview)
        return job

    def _decompress_job(self, archive, out):
        job = _Job("decompress", {})
        if _is_device(archive) or _is_device(out):
            self._cuda_job(job, archive, out, "decompress")
            return job
        view = memoryview(archive).cast("B")
        hdr = _archive.info(view)
        if out is not None:
            # Checked here, before the daemon decodes anything.
            job.out = _archive.check_out(out, hdr.numpy_dtype, hdr.shape, hdr.raw_bytes)
            job.out_user = out
        self._input(job, view)
        self._output(job, hdr.raw_bytes, None)
        return job

    def _submit(self, job):
        self._send(job)

    def _finish(self, job):
        """The job's result: retried on EBUSY (backpressure), read back from
        its memfd when it went there."""
        try:
            while True:
                self._wait(job)
                if job.error is not None and job.error.name == "EBUSY" and \
                        job.tries < _BUSY_RETRIES and self._sock is not None:
                    job.tries += 1
                    job.error = None
                    job.done = False
                    time.sleep(0.01 * min(job.tries, 10))
                    self._send(job)
                    continue
                break
            if job.error is not None:
                raise job.error
            return self._take(job)
        finally:
            self._free(job)

    def _take(self, job):
        res = job.result
        if job.device_out is not None:
            return self._cuda.take(job, res)
        if job.op == "compress":
            if job.out_fd is not None:
                n = int(res["bytes_out"])
                if job.out is not None:
                    if n > len(job.out):
                        raise error("ENOSPC", "the archive has %d bytes, out has room for %d"
                                    % (n, len(job.out)))
                    _pread_into(job.out_fd, job.out[:n])
                    return n
                if n < 1 << 30:  # one copy, straight into the bytes object
                    arc = os.pread(job.out_fd, n, 0)
                    if len(arc) == n:
                        return arc
                arc = bytearray(n)
                _pread_into(job.out_fd, memoryview(arc))
                return bytes(arc)
            arc = res.get("archive")
            if not isinstance(arc, bytes):
                raise error("EPROTO", "a compress result without its archive")
            if job.out is not None:
                if len(arc) > len(job.out):
                    raise error("ENOSPC", "the archive has %d bytes, out has room for %d"
                                % (len(arc), len(job.out)))
                job.out[:len(arc)] = arc
                return len(arc)
            return arc
        dt = _DTYPES.get(res.get("dtype"))
        shape = res.get("shape")
        if dt is None or not isinstance(shape, list):
            raise error("EPROTO", "a decompress result without a known dtype and shape: %r %r"
                        % (res.get("dtype"), shape))
        n = int(res["bytes_out"])
        if n != dt.itemsize * int(np.prod(shape, dtype=np.uint64)):
            raise error("EPROTO", "%d bytes for %s %r" % (n, res.get("dtype"), shape))
        if job.out is not None:
            dview = memoryview(job.out.reshape(-1).view(np.uint8))[:n]
            if job.out_fd is not None:
                _pread_into(job.out_fd, dview)
            else:
                dview[:] = res["data"]
            return job.out_user
        if job.out_fd is not None:
            m = mmap.mmap(job.out_fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            return np.frombuffer(m, dtype=dt).reshape(shape)
        data = res.get("data")
        if not isinstance(data, bytes) or len(data) != n:
            raise error("EPROTO", "a decompress result without its %d bytes of data" % n)
        return np.frombuffer(bytearray(data), dtype=dt).reshape(shape)

    def compress(self, array, pipeline=None, eb=0, mode="rel", fill_value=None,
                 verify=False, out=None):
        """Compresses a numpy array (or anything np.asarray takes, or a
        device array) and returns the archive as bytes; with ``out`` (a
        writable buffer, or a device array) writes it there and returns its
        length.  ``pipeline``: a preset ("fast", "balanced", "lossless") or
        a chain; None is the daemon's default ("balanced").  ``eb`` and
        ``mode`` ("abs", "rel", "pwrel"): the error bound; 0 leaves it to
        the chain.  ``fill_value``: kept bit for bit and left out of rel's
        range.  ``verify``: the daemon decodes again and checks; the
        result is then also in ``last_result`` (max_error...)."""
        job = self._compress_job(array, pipeline, eb, mode, fill_value, verify, out)
        self._submit(job)
        r = self._finish(job)
        self.last_result = {k: v for k, v in job.result.items() if k != "archive"}
        return r

    def decompress(self, archive, out=None):
        """Decompresses an archive (bytes-like, or a device array) into a new
        numpy array of the stored dtype and shape, or into ``out`` (a
        C-contiguous writable array of at least the archive's size, or a
        device array), which is then returned."""
        job = self._decompress_job(archive, out)
        self._submit(job)
        r = self._finish(job)
        self.last_result = {k: v for k, v in job.result.items() if k != "data"}
        if out is not None and job.out is None and not _is_device(out):
            # out passed the checks but is strided or big-endian: copied.
            np.copyto(np.asarray(out), r.reshape(np.shape(out)), casting="equiv")
            return out
        return r

    def _many(self, make, items, depth):
        depth = max(1, int(depth))
        jobs = [None] * len(items)
        results = [None] * len(items)
        first_error = None
        sent = 0
        done = 0
        while done < len(items):
            while sent < len(items) and sent - done < depth:
                job = make(items[sent])
                self._submit(job)
                jobs[sent] = job
                sent += 1
            try:
                results[done] = self._finish(jobs[done])
            except Error as e:
                if first_error is None:
                    first_error = e
                if self._sock is None:
                    for j in jobs[done + 1:sent]:
                        self._free(j)
                    raise
            jobs[done] = None
            done += 1
        if first_error is not None:
            raise first_error
        return results

    def compress_many(self, arrays, pipeline=None, eb=0, mode="rel", fill_value=None,
                      verify=False, depth=4):
        """Compresses a sequence of arrays with up to ``depth`` requests in
        flight on the connection; returns the archives in order.  Every job
        runs; the first failure is raised at the end."""
        return self._many(lambda a: self._compress_job(a, pipeline, eb, mode, fill_value,
                                                       verify, None), list(arrays), depth)

    def decompress_many(self, archives, depth=4):
        """Decompresses a sequence of archives, ``depth`` in flight; arrays in order."""
        return self._many(lambda a: self._decompress_job(a, None), list(archives), depth)

    # ---- device arrays ---------------------------------------------------------

    def _cuda_job(self, job, src, out, op):
        if self.transport != "unix":
            raise error("ETRANSPORT", "device arrays need fzd's Unix socket; this client "
                        "is connected over TCP")
        if self.backend != "gpu":
            raise error("ENOGPU", "device arrays need a daemon on the GPU backend; the "
                        "daemon at '%s' runs the '%s' backend" % (self.address, self.backend))
        if self._cuda is None:
            from . import _cuda
            self._cuda = _cuda.Cuda()
        self._cuda.prepare(self, job, src, out, op)

    def release_device(self, array=None):
        """Asks the daemon to close its imports of the allocation holding a
        device array (all of this connection's imports when None).  Call it
        before freeing device memory that has been sent to fzd."""
        if array is None:
            return self.call("release", {"all": True})["released"]
        if self._cuda is None:
            return 0
        bid = self._cuda.buffer_id(array)
        return self.call("release", {"buffer_ids": [bid]})["released"]
