"""Shared by the Python package's tests: a private fzd for each test class.

FZD_PATH names the fzd binary of the build (ctest sets it; FZD_BINARY,
when set, wins); PYTHONPATH
holds client/python, so the package under test is the source tree's.
Daemon() starts fzd with --backend cpu on a socket in a fresh directory,
waits for READY=1 on a NOTIFY_SOCKET of its own (so the socket is
listening), and stop() sends SIGTERM and requires exit status 0.
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import numpy as np

SKIP = 77  # ctest SKIP_RETURN_CODE


class Daemon:
    def __init__(self, backend="cpu", **settings):
        # FZD_BINARY (as for the Criterion suites' harness) overrides the
        # build's fzd, e.g. with a ThreadSanitizer one.
        self.binary = os.environ.get("FZD_BINARY") or os.environ.get("FZD_PATH")
        if not self.binary:
            raise RuntimeError("FZD_PATH is not set (ctest sets it to the built fzd)")
        self.tmp = tempfile.TemporaryDirectory(prefix="fzd-py-")
        self.socket = os.path.join(self.tmp.name, "fzd.sock")
        config = {"socket_path": self.socket, "backend": backend, "workers": 2}
        config.update(settings)
        self.config_path = os.path.join(self.tmp.name, "fzd.json")
        with open(self.config_path, "w") as f:
            json.dump(config, f)
        notify_path = os.path.join(self.tmp.name, "notify")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(1)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        for k in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC"):
            env.pop(k, None)
        self.log_path = os.path.join(self.tmp.name, "fzd.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([self.binary, "--config", self.config_path,
                                      "--backend", backend],
                                     env=env, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError("fzd exited with %d at start-up: %s"
                                       % (self.proc.returncode, self.log_text()))
                if time.monotonic() > deadline:
                    raise RuntimeError("fzd sent no READY=1 within 60 s")
                try:
                    note = notify.recv(4096).decode()
                except socket.timeout:
                    continue
                if "READY=1" in note.split("\n"):
                    self.ready_note = note
                    break
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            notify.close()
        self.address = "unix:" + self.socket
        # "STATUS=serving unix:PATH tcp:HOST:PORT backend:..." when TCP is on
        self.tcp_address = None
        for word in self.ready_note.replace("\n", " ").split():
            if word.startswith("tcp:"):
                self.tcp_address = word

    def log_text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.log.close()
        self.tmp.cleanup()
        if code != 0:
            raise AssertionError("fzd exited with %d after SIGTERM" % code)


class DaemonTest(unittest.TestCase):
    """A TestCase class with one fzd for all its tests (cls.fzd)."""
    settings = {}

    @classmethod
    def setUpClass(cls):
        cls.fzd = Daemon(**cls.settings)

    @classmethod
    def tearDownClass(cls):
        cls.fzd.stop()


def smooth_field(shape, dtype=np.float32, seed=1):
    """A smooth field with some noise, as simulations produce."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[np.linspace(0, 6.0, n) for n in shape], indexing="ij")
    f = np.zeros(shape, dtype=np.float64)
    for i, g in enumerate(grids):
        f += np.sin(g * (1.3 + i)) * (10.0 / (i + 1))
    f += rng.normal(0, 0.01, shape)
    return f.astype(dtype)


def main():
    unittest.main(verbosity=2)
