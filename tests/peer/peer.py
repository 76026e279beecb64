#!/usr/bin/env python3
"""A peer we did not write: fzd driven with Python's msgpack package alone.

Starts the fzd binary given on the command line with a private config and a
NOTIFY_SOCKET, waits for READY=1, then speaks the wire protocol by hand over
the Unix socket: the hello handshake, ping, a compress and the matching
decompress with inline data (checked against the error bound), two requests
pipelined with their answers matched by msgid, and an unknown method that gets
an error while the connection stays open.  Finally SIGTERM, and fzd must exit
0.  Any failure exits non-zero; a missing msgpack module is a failure too.
"""
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

try:
    import msgpack
except ImportError:
    sys.exit("FAIL: the Python msgpack package is missing (install python3-msgpack)")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Peer:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False)
        self.msgid = 0

    def send(self, method, params):
        self.msgid += 1
        self.sock.sendall(msgpack.packb([0, self.msgid, method, params], use_bin_type=True))
        return self.msgid

    def recv(self):
        while True:
            for msg in self.unpacker:
                return msg
            data = self.sock.recv(1 << 20)
            check(data, "the server closed the connection")
            self.unpacker.feed(data)

    def call(self, method, params):
        msgid = self.send(method, params)
        msg = self.recv()
        check(isinstance(msg, list) and len(msg) == 4 and msg[0] == 1,
              "not a msgpack-RPC response: %r" % (msg,))
        check(msg[1] == msgid, "answer to msgid %r, expected %d" % (msg[1], msgid))
        return msg[2], msg[3]


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
    proc = subprocess.Popen([binary, "--config", config], env=env, stderr=log,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        check(time.monotonic() < deadline, "fzd sent no READY=1")
        try:
            note = notify.recv(4096).decode()
        except socket.timeout:
            continue
        if "READY=1" in note.split("\n"):
            break
    notify.close()
    return proc, sock_path


def field(rows, cols):
    vals = [50.0 * math.sin(0.05 * i) * math.cos(0.03 * j) + 0.01 * j
            for i in range(rows) for j in range(cols)]
    raw = struct.pack("<%df" % len(vals), *vals)
    return raw, list(struct.unpack("<%df" % len(vals), raw))  # float32-rounded


def run(binary):
    with tempfile.TemporaryDirectory(prefix="fzd-peer-") as tmp:
        proc, sock_path = start_fzd(binary, tmp)
        try:
            session(sock_path, proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        check(code == 0, "fzd exited with %d after SIGTERM" % code)


def session(sock_path, pid):
    p = Peer(sock_path)
    err, res = p.call("hello", {"version": 1, "client": "python-msgpack peer"})
    check(err is None, "hello refused: %r" % (err,))
    check(res["version"] == 1, "version %r" % res.get("version"))
    check(res["pid"] == pid, "pid %r is not fzd's %d" % (res.get("pid"), pid))
    check(res["max_inline"] > 0, "max_inline %r" % res.get("max_inline"))
    print("hello:", res["server"], res["backend"])

    err, res = p.call("ping", {})
    check(err is None and isinstance(res["time_ns"], int), "ping: %r %r" % (err, res))

    rows, cols = 64, 200
    raw, vals = field(rows, cols)
    err, res = p.call("compress", {"dtype": "f32", "shape": [rows, cols],
                                   "pipeline": "balanced", "eb": 1e-3, "mode": "rel",
                                   "verify": True, "data": raw})
    check(err is None, "compress refused: %r" % (err,))
    archive = res["archive"]
    check(isinstance(archive, bytes), "archive is not a bin")
    check(res["bytes_in"] == len(raw), "bytes_in %r" % res["bytes_in"])
    check(res["bytes_out"] == len(archive), "bytes_out %r != %d" % (res["bytes_out"], len(archive)))
    check(len(archive) < len(raw), "a smooth field must shrink")
    bound = 1e-3 * (max(vals) - min(vals))
    check(res["max_error"] <= bound, "max_error %r over %r" % (res["max_error"], bound))
    print("compress: %d -> %d bytes, ratio %.2f, max error %.3g" %
          (len(raw), len(archive), res["ratio"], res["max_error"]))

    err, res = p.call("decompress", {"data": archive})
    check(err is None, "decompress refused: %r" % (err,))
    check(res["dtype"] == "f32" and list(res["shape"]) == [rows, cols],
          "dtype/shape %r %r" % (res["dtype"], res["shape"]))
    back = struct.unpack("<%df" % (rows * cols), res["data"])
    worst = max(abs(a - b) for a, b in zip(vals, back))
    check(worst <= bound, "decompressed max error %g over %g" % (worst, bound))

    # Two requests in one write: each answer names its msgid.
    p.msgid += 1
    a = p.msgid
    p.msgid += 1
    b = p.msgid
    p.sock.sendall(msgpack.packb([0, a, "compress", {"dtype": "f32", "shape": [rows, cols],
                                                     "eb": 1e-2, "data": raw}],
                                 use_bin_type=True) +
                   msgpack.packb([0, b, "ping", {}], use_bin_type=True))
    got = {}
    for _ in range(2):
        msg = p.recv()
        check(msg[0] == 1 and msg[2] is None, "pipelined answer %r" % (msg[:3],))
        got[msg[1]] = msg[3]
    check(set(got) == {a, b}, "answers for %r, expected %r" % (sorted(got), [a, b]))
    check("archive" in got[a] and "time_ns" in got[b], "answers mixed up")

    err, res = p.call("no_such_method", {})
    check(err is not None and err["code"] == -4015 and err["name"] == "EMETHOD",
          "unknown method gave %r" % (err,))
    err, res = p.call("ping", {})
    check(err is None, "the connection must stay open after EMETHOD")
    print("peer: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: peer.py FZD_BINARY")
    # Like the C harness, $FZD_BINARY overrides the binary the build names.
    try:
        run(os.environ.get("FZD_BINARY") or sys.argv[1])
    except AssertionError as e:
        sys.exit("FAIL: %s" % e)
