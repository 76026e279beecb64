"""Reading an archive's header without a daemon (docs/format.md).

info() parses the fixed fields, the shape, the stage chain with its
parameters and the chunk table, and checks them the way the engine's
decoder does, in the same order and with the same error names: the magic
(EFORMAT), the fixed fields' length (ETRUNC), the version (EVERSION), the
fields' values (ECORRUPT), the chunk table against the bytes present
(ETRUNC), the header's CRC-32C (ECORRUPT) and the chunk sizes against the
archive's length.  The payload is not read.

Where the engine loads in this process (_engine.py), it checks the header
too, after these checks and as the decoder does before decoding, so that
info() never accepts a header the decoder refuses; it also computes the
header's CRC-32C.  Without it the CRC-32C (Castagnoli, reflected, init and
final XOR 0xffffffff) is computed here with a 256-entry table: a header
holds 2 to 4 bytes per chunk of 16 KiB or more, so a byte-at-a-time loop
costs milliseconds for a 1 GiB array (seconds for headers of many MB).
"""
import struct

import numpy as np

from ._errors import Error, error

MAGIC = b"\x89FZA"

# dtype code of the format -> (fzd name, numpy dtype)
DTYPES = {
    1: ("u8", "<u1"), 2: ("i8", "<i1"), 3: ("u16", "<u2"), 4: ("i16", "<i2"),
    5: ("u32", "<u4"), 6: ("i32", "<i4"), 7: ("u64", "<u8"), 8: ("i64", "<i8"),
    9: ("f32", "<f4"), 10: ("f64", "<f8"),
}
ELEMENT_BYTES = {1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 8, 8: 8, 9: 4, 10: 8}

_MODES = ("abs", "rel", "pwrel")
_MAPS = ("zigzag", "negabinary")


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _crc_table()


def crc32c(data, crc=0):
    """CRC-32C of data (bytes-like), continuing from crc (0 to start)."""
    table = _TABLE
    c = crc ^ 0xFFFFFFFF
    for b in memoryview(data).cast("B"):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


class ArchiveInfo:
    """What an archive's header says.  Attributes: ``version``, ``dtype``
    (fzd's name: "f32"), ``numpy_dtype``, ``shape`` (a tuple, slowest
    first), ``raw_bytes``, ``archive_bytes``, ``ratio``, ``chunks``,
    ``chunk_bytes``, ``eb_abs`` (the absolute bound enforced, 0 for a
    lossless chain; for pwrel the pointwise relative bound), ``mode``
    ("abs", "rel", "pwrel" or None without a quant stage), ``eb`` (the
    bound the user gave), ``fill_value`` (or None) and ``chain`` (the
    canonical chain text, as the daemon's compress result spells it)."""

    __slots__ = ("version", "dtype", "numpy_dtype", "shape", "raw_bytes",
                 "archive_bytes", "ratio", "chunks", "chunk_bytes", "eb_abs",
                 "mode", "eb", "fill_value", "chain", "header_bytes")

    def as_dict(self):
        d = {k: getattr(self, k) for k in self.__slots__}
        d["numpy_dtype"] = d["numpy_dtype"].str
        d["shape"] = list(d["shape"])
        return d

    def __repr__(self):
        return "ArchiveInfo(%s)" % ", ".join(
            "%s=%r" % (k, getattr(self, k)) for k in
            ("dtype", "shape", "raw_bytes", "archive_bytes", "chunks", "eb_abs", "chain"))


class _Reader:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, fmt, what):
        n = struct.calcsize(fmt)
        if self.pos + n > len(self.buf):
            raise error("ETRUNC", "the archive ends inside its header (%s at byte %d of %d)"
                        % (what, self.pos, len(self.buf)))
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v if len(v) > 1 else v[0]


def _fmt(x):
    return "%.17g" % x


def _chain(r, dtype_code, version, ndims):
    n = r.take("<B", "the stage count")
    if not 1 <= n <= 8:
        raise error("ECORRUPT", "the chain has %d stages, not 1 to 8" % n)
    parts = []
    quant = None
    gives_bytes = False
    lorenzo = False
    for i in range(n):
        sid = r.take("<B", "a stage id")
        last = i == n - 1
        if sid == 1:
            mode, eb, eb_abs, step = r.take("<Bddd", "the quant parameters")
            fill = None
            if mode & 0x80:
                if version < 2:
                    raise error("ECORRUPT", "a fill value in a version-1 archive")
                fill = r.take("<d", "the fill value")
            mode &= 0x7F
            if i != 0 or dtype_code not in (9, 10) or mode > 2:
                raise error("ECORRUPT", "quant stage %d (mode %d) is invalid here" % (i, mode))
            quant = (_MODES[mode], eb, eb_abs, fill)
            text = "quant(eb=%s,mode=%s" % (_fmt(eb), _MODES[mode])
            if fill is not None:
                text += ",fill=%s" % _fmt(fill)
            parts.append(text + ")")
        elif sid == 2:
            m = r.take("<B", "the diff map")
            if m > 1 or gives_bytes:
                raise error("ECORRUPT", "diff stage %d is invalid (map %d)" % (i, m))
            parts.append("diff(map=%s)" % _MAPS[m])
        elif sid == 3:
            if gives_bytes:
                raise error("ECORRUPT", "bitshuffle after bitshuffle")
            gives_bytes = True
            parts.append("bitshuffle")
        elif sid == 4:
            levels = r.take("<B", "the rze levels")
            if not 1 <= levels <= 6 or not last:
                raise error("ECORRUPT", "rze stage %d is invalid (levels %d)" % (i, levels))
            parts.append("rze(levels=%d)" % levels)
        elif sid == 5:
            if not last or gives_bytes:
                raise error("ECORRUPT", "bitpack stage %d is not last or gets bytes" % i)
            parts.append("bitpack")
        elif sid in (6, 8):
            # lorenzo and interp (version 3): the dims they predict over.
            d = r.take("<B", "the prediction dims")
            name = "lorenzo" if sid == 6 else "interp"
            if version < 3 or not 1 <= d <= min(3, ndims) or gives_bytes:
                raise error("ECORRUPT", "%s stage %d is invalid (dims %d)" % (name, i, d))
            if sid == 6 and lorenzo:
                raise error("ECORRUPT", "lorenzo twice")
            if sid == 8 and (i != 1 or quant is None):
                raise error("ECORRUPT", "interp does not follow quant")
            lorenzo = lorenzo or sid == 6
            parts.append("%s(dims=%d)" % (name, d))
        elif sid == 7:
            if version < 3 or gives_bytes:
                raise error("ECORRUPT", "huffman stage %d is invalid" % i)
            gives_bytes = True
            parts.append("huffman")
        elif sid == 9:
            # byteplanes (version 4): codes each byte plane of its words.
            if version < 4 or gives_bytes or not last:
                raise error("ECORRUPT", "byteplanes stage %d is invalid" % i)
            parts.append("byteplanes")
        else:
            raise error("ECORRUPT", "unknown stage id %d" % sid)
    return " | ".join(parts), quant


def info(archive):
    """The header of an archive (a bytes-like object holding the whole
    archive) as an ArchiveInfo, checked as the decoder checks it.  Raises
    fzd.Error (EFORMAT, ETRUNC, EVERSION, ECORRUPT) for anything else."""
    buf = memoryview(archive).cast("B")
    if len(buf) < 4 or bytes(buf[:4]) != MAGIC:
        raise error("EFORMAT", "not an fzd archive: it does not start with \\x89FZA")
    r = _Reader(buf)
    r.pos = 4
    version, dcode, ndims, chunk_log2 = r.take("<BBBB", "the fixed fields")
    if version not in (1, 2, 3, 4, 5, 6, 7):
        raise error("EVERSION", "archive format version %d (this reader knows 1 to 7)"
                    % version)
    if dcode not in DTYPES:
        raise error("ECORRUPT", "unknown dtype code %d" % dcode)
    if not 1 <= ndims <= 4:
        raise error("ECORRUPT", "%d dimensions (1 to 4)" % ndims)
    top = 20 if version >= 3 else 15
    if not 12 <= chunk_log2 <= top:
        raise error("ECORRUPT", "chunk size 2^%d (2^12 to 2^%d)" % (chunk_log2, top))
    shape = tuple(r.take("<Q", "the shape") for _ in range(ndims))
    raw = ELEMENT_BYTES[dcode]
    for d in shape:
        if d == 0:
            raise error("ECORRUPT", "a dimension of 0 in shape %r" % (shape,))
        raw *= d
        if raw > 1 << 56:
            raise error("ECORRUPT", "shape %r is over 2^56 bytes" % (shape,))
    chain, quant = _chain(r, dcode, version, ndims)
    r.take("<I", "the payload CRC")
    chunk = 1 << chunk_log2
    nchunks = (raw + chunk - 1) // chunk
    table_at = r.pos
    entry = 4 if version >= 3 else 2  # a u32 per chunk in version 3, else a u16
    if table_at + entry * nchunks + 4 > len(buf):
        raise error("ETRUNC", "the archive has %d bytes, its chunk table needs %d"
                    % (len(buf), table_at + entry * nchunks + 4))
    sizes = np.frombuffer(buf, dtype="<u%d" % entry, count=nchunks, offset=table_at)
    header_end = table_at + entry * nchunks
    stored_crc = struct.unpack_from("<I", buf, header_end)[0]
    from . import _engine  # imports this module: not at the top
    refused = None
    if _engine.available():
        # The decoder's own checks, its CRC-32C included; where it refuses,
        # the checks here run in full first, for their detailed message.
        try:
            _engine.header(buf)
        except Error as e:
            refused = e
    actual = stored_crc if refused is None and _engine.available() else crc32c(buf[:header_end])
    if actual != stored_crc:
        raise error("ECORRUPT", "header CRC-32C mismatch (stored %08x, computed %08x)"
                    % (stored_crc, actual))
    header_bytes = header_end + 4
    last_raw = raw - (nchunks - 1) * chunk
    if nchunks and (int(sizes.min()) < 1 or int(sizes.max()) > chunk or
                    int(sizes[-1]) > last_raw):
        raise error("ECORRUPT", "a chunk size outside 1 to its raw size")
    payload = int(sizes.sum(dtype=np.uint64))
    have = len(buf) - header_bytes
    if have < payload:
        raise error("ETRUNC", "the chunks need %d bytes after the header, the archive has %d"
                    % (payload, have))
    if have > payload:
        raise error("ECORRUPT", "%d bytes after the last chunk" % (have - payload))
    if refused is not None:
        raise refused
    out = ArchiveInfo()
    out.version = version
    out.dtype, npd = DTYPES[dcode]
    out.numpy_dtype = np.dtype(npd)
    out.shape = shape
    out.raw_bytes = raw
    out.archive_bytes = len(buf)
    out.ratio = raw / len(buf)
    out.chunks = nchunks
    out.chunk_bytes = chunk
    out.header_bytes = header_bytes
    out.chain = chain
    if quant:
        out.mode, out.eb, out.eb_abs, out.fill_value = quant
    else:
        out.mode, out.eb, out.eb_abs, out.fill_value = None, 0.0, 0.0, None
    return out


def check_out(out, dtype, shape, raw_bytes):
    """The numpy array to decode into for a caller's ``out``, checked
    against the archive's dtype and shape before anything is decoded, so
    that an archive of another type with the same byte count is refused
    (not read back as garbage) and a small archive that claims a huge array
    decodes nothing.  A typed out (a numpy array, or a buffer with a type
    such as array('f')) must have the archive's dtype in either byte order
    (EDTYPE) and its element count (ENOSPC when fewer, ESHAPE when more),
    with the archive's shape or flat (1-D); a 0-d out takes a one-element
    archive.  An untyped byte buffer (bytearray, mmap, memoryview of bytes)
    takes the raw bytes and must hold at least raw_bytes.  Returns the C
    contiguous array of the archive's dtype that views out, or None when out
    is typed but not C-contiguous (decode elsewhere, then copy)."""
    if isinstance(out, np.ndarray):
        a, typed = out, True
    else:
        try:
            m = memoryview(out)
        except TypeError:
            raise error("EINVAL", "out is a %s, not an array or a writable buffer"
                        % type(out).__name__) from None
        typed = m.format not in ("B", "b", "c")
        a = np.asarray(m) if typed else np.frombuffer(m.cast("B"), np.uint8)
        if m.readonly:
            raise error("EINVAL", "out is a read-only buffer")
    if not a.flags.writeable:
        raise error("EINVAL", "out is a read-only array")
    desc = "%s %s" % (np.dtype(dtype).name, "x".join(map(str, shape)))
    if not typed:
        if a.nbytes < raw_bytes:
            raise error("ENOSPC", "out has %d bytes, the archive holds %d (%s)"
                        % (a.nbytes, raw_bytes, desc))
        return a[:raw_bytes].view(dtype).reshape(shape)
    dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    if dt != np.dtype(dtype):
        raise error("EDTYPE", "out is %s, the archive holds %s: decoding would reinterpret "
                    "its bytes" % (a.dtype.name, desc))
    count = raw_bytes // np.dtype(dtype).itemsize
    if a.size < count:
        raise error("ENOSPC", "out has %d elements, the archive holds %d (%s)"
                    % (a.size, count, desc))
    if a.size > count:
        raise error("ESHAPE", "out has %d elements, the archive holds %d (%s)"
                    % (a.size, count, desc))
    if a.shape != tuple(shape) and a.ndim > 1:
        raise error("ESHAPE", "out has shape %s, the archive holds %s"
                    % ("x".join(map(str, a.shape)), desc))
    if a.dtype.byteorder == ">" or not a.flags.c_contiguous:
        return None
    return a
