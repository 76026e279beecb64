"""Device arrays: CUDA IPC handles for fzd's GPU backend, through ctypes.

Any object with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba) names
device memory by pointer.  fzd reads and writes it in place: the client
finds the allocation the pointer lies in (cuMemGetAddressRange on
libcuda.so.1), exports it as a legacy IPC handle (cuIpcGetMemHandle, the
driver's form of cudaIpcGetMemHandle: memory from cudaMalloc, which is what
CuPy's and PyTorch's allocators use), and sends the handle with the offset
from the allocation's base, the allocation's buffer id (so fzd never reuses
an import of freed memory) and the GPU's UUID.  Only the driver is needed:
no CUDA runtime, no CuPy.  The interface's ``stream``, when given, is
synchronised before the request goes out (the interface's contract for a
consumer), so the daemon sees the producer's writes.

Memory that legacy IPC cannot share (managed memory, cudaMallocAsync's
default pool, host memory) is refused with EINVAL naming the kind;
libfzclient also handles VMM and IPC-pool memory.
"""
import ctypes
import os

import numpy as np

from ._errors import error

# CUpointer_attribute (cuda.h)
_ATTR_CONTEXT = 1
_ATTR_MEMORY_TYPE = 2
_ATTR_BUFFER_ID = 7
_ATTR_IS_MANAGED = 8
_ATTR_DEVICE_ORDINAL = 9
_MEMORYTYPE_HOST = 1
_MEMORYTYPE_DEVICE = 2
_IPC_HANDLE_BYTES = 64


class _Uuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


class _Export:
    __slots__ = ("ptr", "nbytes", "base", "handle", "buffer_id", "uuid", "ordinal")


def _interface(obj, what):
    cai = obj.__cuda_array_interface__
    shape = tuple(int(d) for d in cai["shape"])
    dt = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None:
        expect = []
        step = dt.itemsize
        for d in reversed(shape):
            expect.append(step)
            step *= d
        if tuple(strides) != tuple(reversed(expect)) and int(np.prod(shape)) > 1:
            raise error("EINVAL", "the %s device array is not C-contiguous (strides %r)"
                        % (what, tuple(strides)))
    ptr, readonly = cai["data"]
    return shape, dt, int(ptr or 0), bool(readonly), cai.get("stream")


class Cuda:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise error("ENOGPU", "device arrays need the CUDA driver, and libcuda.so.1 "
                        "cannot be loaded: %s" % e) from None
        self._check(self.lib.cuInit(ctypes.c_uint(0)), "cuInit")
        self._sym = {}

    def close(self):
        pass

    def _fn(self, *names):
        for n in names:
            f = getattr(self.lib, n, None)
            if f is not None:
                return f
        raise error("ENOGPU", "the CUDA driver lacks %s" % names[0])

    def _name(self, r):
        s = ctypes.c_char_p()
        if self.lib.cuGetErrorName(ctypes.c_int(r), ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
        return "CUresult %d" % r

    def _check(self, r, what):
        if r != 0:
            raise error("ECUDA", "%s: %s" % (what, self._name(r)))

    def _attr(self, ctype, attr, ptr):
        v = ctype()
        r = self._fn("cuPointerGetAttribute")(ctypes.byref(v), ctypes.c_int(attr),
                                               ctypes.c_uint64(ptr))
        return r, v.value

    def export(self, obj, what):
        """The allocation holding a device array, exported."""
        shape, dt, ptr, readonly, stream = _interface(obj, what)
        if ptr == 0:
            raise error("EINVAL", "the %s device array has no memory (a null pointer)" % what)
        r, mtype = self._attr(ctypes.c_uint, _ATTR_MEMORY_TYPE, ptr)
        if r != 0:
            raise error("EINVAL", "the %s array at 0x%x is not CUDA device memory (%s)"
                        % (what, ptr, self._name(r)))
        # A boolean the driver may write as a wider word: room for 8 bytes.
        r, managed = self._attr(ctypes.c_uint64, _ATTR_IS_MANAGED, ptr)
        if r == 0 and managed:
            raise error("EINVAL", "the %s array at 0x%x is managed memory, which cannot be "
                        "shared with fzd: allocate it with cudaMalloc (CuPy's and "
                        "PyTorch's default allocators do)" % (what, ptr))
        if mtype != _MEMORYTYPE_DEVICE:
            raise error("EINVAL", "the %s array at 0x%x is %s memory, not device memory"
                        % (what, ptr, "host" if mtype == _MEMORYTYPE_HOST else "non-device"))
        e = _Export()
        e.ptr = ptr
        e.nbytes = dt.itemsize * int(np.prod(shape, dtype=np.uint64))
        r, e.ordinal = self._attr(ctypes.c_int, _ATTR_DEVICE_ORDINAL, ptr)
        self._check(r, "the device of the %s array" % what)
        r, e.buffer_id = self._attr(ctypes.c_ulonglong, _ATTR_BUFFER_ID, ptr)
        if r != 0:
            e.buffer_id = None
        dev = ctypes.c_int()
        self._check(self._fn("cuDeviceGet")(ctypes.byref(dev), ctypes.c_int(e.ordinal)),
                    "cuDeviceGet")
        u = _Uuid()
        self._check(self._fn("cuDeviceGetUuid_v2", "cuDeviceGetUuid")(ctypes.byref(u), dev),
                    "cuDeviceGetUuid")
        b = bytes(u.bytes)
        h = b.hex()
        e.uuid = "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
        # The driver calls below run in the memory's context.
        r, ctx = self._attr(ctypes.c_void_p, _ATTR_CONTEXT, ptr)
        primary = False
        if r != 0 or not ctx:
            c = ctypes.c_void_p()
            self._check(self._fn("cuDevicePrimaryCtxRetain")(ctypes.byref(c), dev),
                        "cuDevicePrimaryCtxRetain")
            ctx, primary = c.value, True
        self._check(self._fn("cuCtxPushCurrent_v2", "cuCtxPushCurrent")(ctypes.c_void_p(ctx)),
                    "cuCtxPushCurrent")
        try:
            if stream is not None:
                # The interface's contract: the consumer waits for the
                # producer's stream (1: the legacy default stream, 2: per
                # thread, else a CUstream) before it touches the data.
                self._check(self._fn("cuStreamSynchronize")(ctypes.c_void_p(int(stream))),
                            "cuStreamSynchronize on the %s array's stream" % what)
            base = ctypes.c_uint64()
            size = ctypes.c_size_t()
            self._check(self._fn("cuMemGetAddressRange_v2", "cuMemGetAddressRange")(
                ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)),
                "cuMemGetAddressRange on the %s array" % what)
            if ptr + e.nbytes > base.value + size.value:
                raise error("EINVAL", "the %s array runs past the end of its allocation" % what)
            handle = (ctypes.c_char * _IPC_HANDLE_BYTES)()
            r = self._fn("cuIpcGetMemHandle")(handle, ctypes.c_uint64(base.value))
            if r != 0:
                raise error("EINVAL", "the %s array's memory cannot be shared with another "
                            "process (cuIpcGetMemHandle: %s): allocate it with cudaMalloc "
                            "(not cudaMallocAsync or managed memory)" % (what, self._name(r)))
            e.base = base.value
            e.handle = bytes(handle.raw)
        finally:
            old = ctypes.c_void_p()
            self._fn("cuCtxPopCurrent_v2", "cuCtxPopCurrent")(ctypes.byref(old))
            if primary:
                self._fn("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")(dev)
        return e, shape, dt, readonly

    def buffer_id(self, obj):
        _, _, ptr, _, _ = _interface(obj, "released")
        r, bid = self._attr(ctypes.c_ulonglong, _ATTR_BUFFER_ID, ptr)
        self._check(r, "the buffer id of the array")
        return bid

    @staticmethod
    def _side(params, side, e):
        params[side + "_ipc"] = e.handle
        params[side + "_offset"] = e.ptr - e.base
        if e.buffer_id is not None:
            params[side + "_buffer_id"] = e.buffer_id
        params["device"] = e.uuid

    def prepare(self, client, job, src, out, op):
        from ._client import _host_view, _is_device, dtype_name, compress_bound
        p = job.params
        devs = []
        if _is_device(src):
            e, shape, dt, _ = self.export(src, "input")
            self._side(p, "in", e)
            p["in_length"] = e.nbytes
            devs.append(e)
            nbytes = e.nbytes
            if op == "compress":
                p["dtype"] = dtype_name(dt)
                p["shape"] = list(shape) or [1]
        else:
            if op == "compress":
                a, view = _host_view(src)
                p["dtype"] = dtype_name(a.dtype)
                p["shape"] = list(a.shape)
            else:
                view = memoryview(src).cast("B")
            nbytes = len(view)
            client._input(job, view)
        if _is_device(out):
            e, _, _, readonly = self.export(out, "output")
            if readonly:
                raise error("EINVAL", "the output device array is read-only")
            self._side(p, "out", e)
            p["out_length"] = e.nbytes
            devs.append(e)
            job.device_out = out
            job.out = None
        elif op == "decompress" and _is_device(src):
            # The archive's header is on the device: the result's size is
            # not known here, so it comes back through a memfd.
            job.out_fd = os.memfd_create("fzd-python-output", os.MFD_CLOEXEC)
            if out is not None:
                job.out = out
        else:
            client._output(job, compress_bound(nbytes) if op == "compress" else 1 << 62,
                           job.out)
        if len(devs) == 2 and devs[0].uuid != devs[1].uuid:
            raise error("EINVAL", "input and output are on two GPUs (%s, %s)"
                        % (devs[0].uuid, devs[1].uuid))

    def take(self, job, res):
        if job.op == "compress":
            return int(res["bytes_out"])
        return job.device_out
