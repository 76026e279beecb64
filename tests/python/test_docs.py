#!/usr/bin/env python3
"""The example of docs/python.md runs: the code block after the marker
"<!-- example: test_python_docs runs this block -->" is extracted and run
with a python3 of its own against a private fzd (FZD_SOCKET), and must exit
0 and print what it says it prints."""
import os
import re
import subprocess
import sys
import unittest

import fzdtest


def example():
    path = os.path.join(os.environ["FZD_SOURCE_DIR"], "docs", "python.md")
    with open(path) as f:
        text = f.read()
    m = re.search(r"<!-- example: test_python_docs runs this block -->\n```python\n(.*?)\n```",
                  text, re.S)
    if not m:
        raise AssertionError("docs/python.md has no example block after the marker")
    return m.group(1)


class Docs(fzdtest.DaemonTest):
    def test_example_runs(self):
        env = dict(os.environ, FZD_SOCKET=self.fzd.address)
        r = subprocess.run([sys.executable, "-c", example()], env=env, capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("on the cpu backend", r.stdout)
        self.assertIn("chain: quant(eb=0.0001,mode=rel)", r.stdout)
        self.assertIn("refused: EBOUND -4008", r.stdout)


if __name__ == "__main__":
    fzdtest.main()
