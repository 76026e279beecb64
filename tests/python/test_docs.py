#!/usr/bin/env python3
"""The examples of docs/python.md run: each code block after the marker
"<!-- example: test_python_docs runs this block -->" is extracted and run
with a python3 of its own against a private fzd (FZD_SOCKET), and must exit
0 and print what it says it prints."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

import fzdtest


def examples():
    path = os.path.join(os.environ["FZD_SOURCE_DIR"], "docs", "python.md")
    with open(path) as f:
        text = f.read()
    blocks = re.findall(r"<!-- example: test_python_docs runs this block -->\n```python\n(.*?)\n```",
                        text, re.S)
    if len(blocks) != 2:
        raise AssertionError("docs/python.md: %d example blocks after the marker, not 2"
                             % len(blocks))
    return blocks


class Docs(fzdtest.DaemonTest):
    def run_example(self, code):
        with tempfile.TemporaryDirectory(prefix="fzd-docs-") as tmp:  # what it writes
            env = dict(os.environ, FZD_SOCKET=self.fzd.address, TMPDIR=tmp)
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_client_example_runs(self):
        out = self.run_example(examples()[0])
        self.assertIn("on the cpu backend", out)
        self.assertIn("chain: quant(eb=0.0001,mode=rel)", out)
        self.assertIn("refused: EBOUND -4008", out)

    def test_zarr_example_runs(self):
        out = self.run_example(examples()[1])
        self.assertIn("FZD(pipeline='balanced', eb=0.0001", out)
        self.assertIn("chunk 2.1.1: ArchiveInfo(dtype='f32', shape=(1, 600, 1200)", out)


if __name__ == "__main__":
    fzdtest.main()
