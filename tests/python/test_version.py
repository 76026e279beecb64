#!/usr/bin/env python3
"""The Python package's version is the project's: fzd.__version__ (from
client/python/fzd/_version.py) equals CMake's PROJECT_VERSION (argv[1]), and
pyproject.toml takes its version from that same file, so a release that
bumps project(VERSION) without the package fails here."""
import os
import sys
import tomllib

import fzd


def main():
    want = sys.argv[1]
    if fzd.__version__ != want:
        sys.exit("FAIL: fzd.__version__ is %r, the CMake project's version is %r "
                 "(edit client/python/fzd/_version.py)" % (fzd.__version__, want))
    path = os.path.join(os.environ["FZD_SOURCE_DIR"], "client", "python", "pyproject.toml")
    with open(path, "rb") as f:
        proj = tomllib.load(f)
    dyn = proj["tool"]["setuptools"]["dynamic"]["version"]
    if "version" in proj["project"] or "version" not in proj["project"].get("dynamic", []) \
            or dyn != {"attr": "fzd._version.__version__"}:
        sys.exit("FAIL: pyproject.toml must take its version from fzd._version, not %r"
                 % (proj["project"].get("version") or dyn,))
    print("fzd Python package %s == project %s" % (fzd.__version__, want))


if __name__ == "__main__":
    main()
