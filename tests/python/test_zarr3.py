#!/usr/bin/env python3
"""A zarr 3 store written through a real fzd reads back with no daemon.

zarr 3 comes from pip into a virtual environment under the build folder
($FZD_PY_BUILD_DIR/zarr3-venv, made once and reused while it works); the
package is the one test_python_install built and installed with pip
($FZD_PY_BUILD_DIR/site, a ctest fixture), with its own engine.  A writer
process stores five arrays with fzd.zarr3.FZDCodec as their serializer
while a fzd (the build's, CPU backend) answers at FZD_SOCKET, and the test
checks that the daemon compressed every chunk.  The daemon is then
stopped, and a fresh process whose FZD_SOCKET points nowhere opens the
store with zarr alone (the codec found through the zarr.codecs entry
point; nothing imports fzd first) and reads every array: an ABS array and
a REL array with edge chunks (zarr pads them with the fill value, which
the codec keeps out of REL's range) within 1.0x their bound, f64 through
the ratio preset, integers and a 0-d array bit for bit, shape ()
included.  The zarr 3 example of docs/python.md (its "python zarr3"
block) runs with the same environment and no daemon."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import fzdtest

import fzd

VENV_PACKAGES = ["zarr>=3", "msgpack"]

WRITE = r"""
import json, sys
import numpy as np
import zarr
from fzd.zarr3 import FZDCodec

out = sys.argv[1]
y, x = np.mgrid[0:500, 0:700].astype(np.float32)
field = (np.sin(x / 40) * np.cos(y / 30) * 50 + 100 + y / 10).astype(np.float32)
rng = np.random.default_rng(3)
arrays = {
    "abs": (field, (128, 256), FZDCodec(eb=0.01, mode="abs")),
    "rel": (field, (128, 256), FZDCodec(eb=1e-3, mode="rel")),
    "f64": ((field.astype(np.float64) * 1.5)[:96, :160].reshape(24, 4, 160).copy(),
            (16, 4, 64), FZDCodec(pipeline="ratio", eb=1e-6, mode="rel")),
    "ints": (rng.integers(-40000, 40000, (300, 70)).astype(np.int32), (64, 64), FZDCodec()),
    "scalar": (np.array(2.75), (), FZDCodec(pipeline="lossless")),
}
chunks = 0
for name, (a, ch, codec) in arrays.items():
    z = zarr.create_array(out + "/store.zarr", name=name, shape=a.shape, dtype=a.dtype,
                          chunks=ch, serializer=codec, compressors=None)
    z[...] = a
    np.save(out + "/%s.npy" % name, a)
    chunks += z.nchunks
print(json.dumps({"chunks": chunks}))
"""

READ = r"""
import json, sys
import numpy as np
import zarr

out = sys.argv[1]
assert "fzd" not in sys.modules
g = zarr.open_group(out + "/store.zarr", mode="r")
res = {}
for name in ("abs", "rel", "f64", "ints", "scalar"):
    z = g[name]
    a = np.load(out + "/%s.npy" % name)
    back = z[...]
    meta = json.load(open(out + "/store.zarr/%s/zarr.json" % name))
    res[name] = {
        "codecs": [c["name"] for c in meta["codecs"]],
        "config": meta["codecs"][0].get("configuration"),
        "shape": list(np.shape(back)), "dtype": str(back.dtype),
        "max_error": float(np.abs(back.astype(np.float64) - a.astype(np.float64)).max()),
        "range": float(a.max()) - float(a.min()),
        "exact": np.asarray(back).tobytes() == a.tobytes(),
    }
res["codec_module"] = type(g["abs"].metadata.codecs[0]).__module__
print(json.dumps(res))
"""


def clean_env(**extra):
    # pip's numpy and the package's own engine: no sanitizer run-time, no
    # engine of the build's, no source tree on the path.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_PRELOAD", "FZD_ENGINE_LIB", "FZD_SOCKET")}
    env.update(extra)
    return env


def venv_python():
    """The python3 of the cached virtual environment with zarr 3."""
    venv = os.path.join(os.environ["FZD_PY_BUILD_DIR"], "zarr3-venv")
    py = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "fzd-ready")
    if os.path.exists(stamp):
        r = subprocess.run([py, "-c", "import zarr, msgpack; assert int(zarr.__version__[0]) >= 3"],
                           env=clean_env(), capture_output=True)
        if r.returncode == 0:
            return py
    shutil.rmtree(venv, ignore_errors=True)
    for cmd in ([sys.executable, "-m", "venv", venv],
                [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"] +
                VENV_PACKAGES):
        r = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise AssertionError("%s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    open(stamp, "w").close()
    return py


class Zarr3(unittest.TestCase):
    def test_write_through_fzd_read_without(self):
        py = venv_python()
        site = os.path.join(os.environ["FZD_PY_BUILD_DIR"], "site")
        self.assertTrue(os.path.isdir(os.path.join(site, "fzd")),
                        "no installed package: test_python_install makes it")
        with tempfile.TemporaryDirectory(prefix="fzd-zarr3-") as tmp:
            daemon = fzdtest.Daemon()
            try:
                with fzd.Client(daemon.address) as c:
                    before = c.stats()["compress"]["count"]
                r = subprocess.run([py, "-c", WRITE, tmp], capture_output=True, text=True,
                                   env=clean_env(PYTHONPATH=site, FZD_SOCKET=daemon.address),
                                   timeout=300)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                chunks = json.loads(r.stdout)["chunks"]
                with fzd.Client(daemon.address) as c:
                    # Every chunk went through the daemon.
                    self.assertEqual(c.stats()["compress"]["count"] - before, chunks)
            finally:
                daemon.stop()
            r = subprocess.run([py, "-c", READ, tmp], capture_output=True, text=True,
                               env=clean_env(PYTHONPATH=site,
                                             FZD_SOCKET="unix:/nonexistent/fzd.sock"),
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            res = json.loads(r.stdout)
        self.assertEqual(res["codec_module"], "fzd.zarr3")
        for name in ("abs", "rel", "f64", "ints", "scalar"):
            self.assertEqual(res[name]["codecs"], ["fzd"], name)
        self.assertEqual(res["abs"]["config"], {"eb": 0.01, "mode": "abs"})
        self.assertLessEqual(res["abs"]["max_error"], 0.01)
        self.assertGreater(res["abs"]["max_error"], 0)
        # REL per chunk, over the chunk's cells without zarr's padding: never
        # above the bound relative to the whole array's range.
        self.assertLessEqual(res["rel"]["max_error"], 1e-3 * res["rel"]["range"])
        self.assertGreater(res["rel"]["max_error"], 0)
        self.assertLessEqual(res["f64"]["max_error"], 1e-6 * res["f64"]["range"])
        self.assertTrue(res["ints"]["exact"])
        self.assertEqual(res["ints"]["dtype"], "int32")
        self.assertTrue(res["scalar"]["exact"])
        self.assertEqual(res["scalar"]["shape"], [])

    def test_docs_example(self):
        path = os.path.join(os.environ["FZD_SOURCE_DIR"], "docs", "python.md")
        with open(path) as f:
            (code,) = re.findall(r"^```python zarr3\n(.*?)\n```$", f.read(), re.S | re.M)
        site = os.path.join(os.environ["FZD_PY_BUILD_DIR"], "site")
        with tempfile.TemporaryDirectory(prefix="fzd-zarr3-docs-") as tmp:
            r = subprocess.run([venv_python(), "-c", code], capture_output=True, text=True,
                               env=clean_env(PYTHONPATH=site, TMPDIR=tmp,
                                             FZD_SOCKET="unix:/nonexistent/fzd.sock"),
                               cwd=tmp, timeout=300)
        self.assertEqual(r.returncode, 0, code + "\n" + r.stdout + r.stderr)
        self.assertIn("FZDCodec(pipeline=None, eb=0.01, mode='abs'", r.stdout)
        self.assertIn(" 9 chunks", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
