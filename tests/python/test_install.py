#!/usr/bin/env python3
"""`pip install` of the package builds what it needs and installs what the
source tree has.  The package (client/python) and the C sources it
compiles are copied into a scratch tree laid out as the fzd tree is; an
sdist is made there (setup.py sdist) and must carry the C sources under
native/; pip installs that sdist (offline: no build isolation, no index;
Debian's python3-pip and python3-setuptools), which compiles the engine
and the HDF5 filter plugin, into $FZD_PY_BUILD_DIR/site.  A python3 that
sees only that folder (no FZD_ENGINE_LIB, no daemon) imports fzd from it,
reports the project's version in fzd.__version__ and in the metadata of
the distribution pyfzd, finds the numcodecs codec and the zarr 3 codec
through their entry points before anything imported them, runs the
engine inside the package (its archives byte for byte those of the
build's engine, which test_python_engine holds to the daemon's), finds the
plugins in fzd/plugins, and writes and reads an HDF5 dataset with them
through Debian's h5py.  The
installed folder is test_python_zarr3's (a ctest fixture)."""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

CHECK = r"""
import ctypes, glob, importlib.metadata, os, sys
site = sys.argv[1]
import numcodecs.registry as reg
reg.run_entrypoints()
assert "fzd" in reg.entries, "no numcodecs.codecs entry point named fzd: %r" % list(reg.entries)
assert "fzd" not in reg.codec_registry
codec = reg.get_codec({"id": "fzd", "pipeline": "fast", "eb": 0.01, "mode": "abs"})
import fzd
assert fzd.__file__.startswith(site), fzd.__file__
assert type(codec).__module__ == "fzd.numcodecs", type(codec)
zarr3 = [e for e in importlib.metadata.entry_points(group="zarr.codecs") if e.name == "fzd"]
assert [e.value for e in zarr3] == ["fzd.zarr3:FZDCodec"], zarr3
# The engine is the package's own, and runs with no daemon.
import numpy as np
from fzd import _engine
lib = _engine.library()._name
assert lib.startswith(os.path.join(site, "fzd", "_libfzengine")), lib
a = np.linspace(-5, 5, 100000, dtype=np.float32).reshape(200, 500)
back = fzd.decompress(fzd.compress(a, eb=1e-3, mode="abs"))
assert back.shape == a.shape and np.abs(back - a).max() <= 1e-3
enc = codec.encode(a)
assert np.abs(codec.decode(enc) - a).max() <= 0.01
for name in ("libh5z_fzd.so", "libh5z_fzd_legacy.so"):
    plugin = ctypes.CDLL(os.path.join(site, "fzd", "plugins", name))
    assert plugin.H5PLget_plugin_type and plugin.H5PLget_plugin_info
# The installed plugin writes and reads through h5py, with no daemon.
import h5py, fzd.h5
assert fzd.h5.PLUGIN_PATH == os.path.join(site, "fzd", "plugins"), fzd.h5.PLUGIN_PATH
with h5py.File("t.h5", "w") as f:
    f.create_dataset("t", data=a, chunks=(64, 100), **fzd.h5.filter(eb=1e-3, mode="abs"))
with h5py.File("t.h5", "r") as f:
    assert str(fzd.h5.FILTER_ID) in f["t"]._filters, f["t"]._filters
    assert np.abs(f["t"][...] - a).max() <= 1e-3
import hashlib
print(" ".join(hashlib.sha256(fzd.compress(x, local=True, **kw)).hexdigest()
               for x, kw in cases()))
print(fzd.__version__, importlib.metadata.version("pyfzd"))
"""

# Archives the pip-built engine must make byte for byte as the build's does
# (the flags setup.py compiles with are CMake's).
CASES = r"""
def cases():
    import numpy as np
    y, x = np.mgrid[0:300, 0:500]
    f = (np.sin(x / 37.0) * np.cos(y / 23.0) * 80 + y / 7.0).astype(np.float32)
    return [(f, dict(eb=1e-3)), (f, dict(pipeline="fast", eb=0.01, mode="abs")),
            (f.astype(np.float64), dict(pipeline="ratio", eb=1e-5)),
            (f, dict(pipeline="balanced", eb=1e-2, mode="pwrel")),
            ((f * 10).astype(np.int32), dict(pipeline="lossless"))]
"""

# What setup.py compiles, relative to the fzd tree (its NATIVE_DIRS).
NATIVE = ("engine", "client/hdf5", "client/src", "client/include", "proto/include",
          "proto/src")


def clean_env():
    # The build and the check run uninstrumented programs: no sanitizer
    # run-time preloaded, no engine of the build's, no daemon.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_PRELOAD", "FZD_ENGINE_LIB")}
    env["FZD_SOCKET"] = "unix:/nonexistent/fzd.sock"
    return env


class Install(unittest.TestCase):
    def test_sdist_and_pip_install(self):
        root = os.environ["FZD_SOURCE_DIR"]
        site = os.path.join(os.environ["FZD_PY_BUILD_DIR"], "site")
        shutil.rmtree(site, ignore_errors=True)
        env = clean_env()
        with tempfile.TemporaryDirectory(prefix="fzd-pip-") as tmp:
            tree = os.path.join(tmp, "tree")
            pkg = os.path.join(tree, "client", "python")
            shutil.copytree(os.path.join(root, "client", "python"), pkg,
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__",
                                                          "native", "_libfzengine*", "plugins"))
            for p in NATIVE:
                src, dst = os.path.join(root, p), os.path.join(tree, p)
                if os.path.isdir(src):
                    shutil.copytree(src, dst)
                else:
                    shutil.copy2(src, dst)
            dist = os.path.join(tmp, "dist")
            r = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", dist], cwd=pkg,
                               env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            (sdist,) = os.listdir(dist)
            self.assertTrue(sdist.startswith("pyfzd-"), sdist)
            with tarfile.open(os.path.join(dist, sdist)) as t:
                names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
            for want in ("setup.py", "src/fzflat.c", "src/fzengine.map",
                         "native/engine/CMakeLists.txt", "native/engine/src/plan.c",
                         "native/engine/include/fz.h", "native/client/hdf5/h5z_fzd.c",
                         "native/proto/src/scan.c", "fzd/zarr3.py"):
                self.assertIn(want, names)
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                                "--no-deps", "--no-index", "--disable-pip-version-check",
                                "--no-cache-dir", "-v", "--target", site,
                                os.path.join(dist, sdist)],
                               env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("fzd: HDF5 filter plugin built", r.stdout + r.stderr)
        env["PYTHONPATH"] = site
        with tempfile.TemporaryDirectory(prefix="fzd-pip-check-") as tmp:
            r = subprocess.run([sys.executable, "-c", CASES + CHECK, site], env=env, cwd=tmp,
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        sys.path.insert(0, os.path.join(root, "client", "python"))
        import hashlib
        import fzd
        digests, versions = r.stdout.strip().split("\n")
        self.assertEqual(versions.split(), [fzd.__version__, fzd.__version__])
        ns = {}
        exec(CASES, ns)
        self.assertEqual(digests.split(), [hashlib.sha256(fzd.compress(x, local=True, **kw))
                                           .hexdigest() for x, kw in ns["cases"]()])


if __name__ == "__main__":
    unittest.main(verbosity=2)
