"""fzd's error codes and the one exception class that carries them.

The table is engine/include/fz_error.h's (code, name, default message); a
test compares the two, so they cannot drift.  The daemon sends the code, the
name and a message that may carry details; errors found in this package
(connection failures, device arrays without CUDA) use the same codes.
"""

ERRORS = (
    (-5, "EIO", "input/output error"),
    (-12, "ENOMEM", "out of memory"),
    (-13, "EACCES", "permission denied"),
    (-16, "EBUSY", "server busy: queue full, try again later"),
    (-22, "EINVAL", "invalid argument"),
    (-28, "ENOSPC", "output buffer too small"),
    (-32, "EPIPE", "broken pipe"),
    (-34, "ERANGE", "value out of range"),
    (-38, "ENOSYS", "not implemented by this build"),
    (-71, "EPROTO", "protocol error"),
    (-90, "EMSGSIZE", "message too large"),
    (-104, "ECONNRESET", "connection reset by peer"),
    (-110, "ETIMEDOUT", "timed out"),
    (-111, "ECONNREFUSED", "connection refused"),
    (-125, "ECANCELED", "operation canceled"),
    (-4001, "EFORMAT", "not an fzd archive (bad magic)"),
    (-4002, "EVERSION", "unsupported archive or protocol version"),
    (-4003, "ETRUNC", "archive is truncated"),
    (-4004, "ECORRUPT", "archive is corrupt (checksum or structure mismatch)"),
    (-4005, "EPIPELINE", "malformed pipeline specification"),
    (-4006, "EDTYPE", "data type not supported by this pipeline"),
    (-4007, "ESHAPE", "invalid shape"),
    (-4008, "EBOUND", "invalid error bound"),
    (-4009, "ENOGPU", "no usable GPU"),
    (-4010, "ECUDA", "CUDA error"),
    (-4011, "ENVRTC", "run-time kernel compilation failed"),
    (-4012, "EGPUOOM", "out of GPU memory"),
    (-4013, "EHANDSHAKE", "handshake required before any other request"),
    (-4014, "EAUTH", "authentication failed"),
    (-4015, "EMETHOD", "unknown method"),
    (-4016, "EPARAMS", "missing or invalid request parameter"),
    (-4017, "ESHUTDOWN", "server is shutting down"),
    (-4018, "ECONFIG", "invalid configuration"),
    (-4019, "ETRANSPORT", "operation not allowed on this transport"),
    (-4020, "ESIZE", "buffer size does not match dtype and shape"),
)

_BY_CODE = {code: (name, text) for code, name, text in ERRORS}
_BY_NAME = {name: (code, text) for code, name, text in ERRORS}


class Error(Exception):
    """An fzd failure: ``name`` ("EBOUND"), ``code`` (the negative integer
    of fz_error.h, stable across versions: switch on it) and ``message``
    (the one-line explanation, with the details the daemon gave)."""

    def __init__(self, name, code=None, message=None):
        if code is None:
            code = _BY_NAME.get(name, (-5, ""))[0]
        if not message:
            message = _BY_CODE.get(code, (name, name))[1]
        super().__init__("%s (%d): %s" % (name, code, message))
        self.name = name
        self.code = code
        self.message = message

    def __reduce__(self):
        return (type(self), (self.name, self.code, self.message))

    @classmethod
    def from_wire(cls, err):
        """The exception for a response's error map (or a malformed one)."""
        if not isinstance(err, dict):
            return cls("EPROTO", -71, "malformed error in a response: %r" % (err,))
        code = err.get("code")
        name = err.get("name")
        if not isinstance(code, int):
            code = -71
        if not isinstance(name, str):
            name = _BY_CODE.get(code, ("EPROTO",))[0]
        message = err.get("message")
        if not isinstance(message, str):
            message = None
        return cls(name, code, message)


def error(name, message):
    """An Error of this package's own, by name."""
    return Error(name, _BY_NAME[name][0], message)
