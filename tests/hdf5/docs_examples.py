#!/usr/bin/env python3
"""docs/hdf5.md holds the examples that tests run, verbatim: each fenced
block preceded by a line `<!-- example: FILE -->` must equal tests/hdf5/FILE
byte for byte, and all three examples must be there.

usage: docs_examples.py DOCS_PAGE EXAMPLES_DIR
"""
import os
import re
import sys


def main(page, folder):
    text = open(page).read()
    found = {}
    # The info string may carry the docs runner's marks (```python run).
    for m in re.finditer(r"<!-- example: (\S+) -->\n```[^\n]*\n(.*?)```\n", text, re.S):
        found[m.group(1)] = m.group(2)
    for name in ("example.c", "example.py", "example_chain.py"):
        if name not in found:
            sys.exit("FAIL: %s does not include %s" % (page, name))
        want = open(os.path.join(folder, name)).read()
        if found[name] != want:
            sys.exit("FAIL: the %s in %s differs from tests/hdf5/%s" % (name, page, name))
    print("docs/hdf5.md: examples verbatim:", ", ".join(sorted(found)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: docs_examples.py DOCS_PAGE EXAMPLES_DIR")
    main(*sys.argv[1:])
