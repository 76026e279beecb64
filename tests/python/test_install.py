#!/usr/bin/env python3
"""`pip install ./client/python` works and installs what the source tree
has: a copy of the package directory is installed with pip (offline: no
build isolation, no index; Debian's python3-pip and python3-setuptools)
into a private target, and a python3 that sees only that target imports
fzd from it, reports the project's version in fzd.__version__ and in the
installed metadata, and finds the numcodecs codec through the
`numcodecs.codecs` entry point before anything imported fzd.numcodecs."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

CHECK = r"""
import importlib.metadata, sys
import numcodecs.registry as reg
reg.run_entrypoints()
assert "fzd" in reg.entries, "no numcodecs.codecs entry point named fzd: %r" % list(reg.entries)
assert "fzd" not in reg.codec_registry
codec = reg.get_codec({"id": "fzd", "pipeline": "fast", "eb": 0.01, "mode": "abs"})
import fzd
assert fzd.__file__.startswith(sys.argv[1]), fzd.__file__
assert type(codec).__module__ == "fzd.numcodecs", type(codec)
print(fzd.__version__, importlib.metadata.version("fzd"))
"""


class Install(unittest.TestCase):
    def test_pip_install(self):
        src = os.path.join(os.environ["FZD_SOURCE_DIR"], "client", "python")
        with tempfile.TemporaryDirectory(prefix="fzd-pip-") as tmp:
            copy = os.path.join(tmp, "src")
            shutil.copytree(src, copy, ignore=shutil.ignore_patterns(
                "build", "*.egg-info", "__pycache__"))
            site = os.path.join(tmp, "site")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                                "--no-deps", "--no-index", "--disable-pip-version-check", "--no-cache-dir",
                                "--target", site, copy], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env["PYTHONPATH"] = site
            r = subprocess.run([sys.executable, "-c", CHECK, site], env=env,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            sys.path.insert(0, src)
            import fzd
            self.assertEqual(r.stdout.split(), [fzd.__version__, fzd.__version__])


if __name__ == "__main__":
    unittest.main(verbosity=2)
