#!/usr/bin/env python3
"""The examples of docs/python.md run: each block whose info string is
"python run" is extracted and run, in order, by a python3 of its own
against a private fzd (FZD_SOCKET) with the build's engine
(FZD_ENGINE_LIB), in one scratch directory, and must exit 0 and print
what it says it prints.  (The block marked "python zarr3" needs pip's zarr
3: test_python_zarr3 runs it.)"""
import os
import re
import subprocess
import sys
import tempfile

import fzdtest

RUN = re.compile(r"^```python run\n(.*?)\n```$", re.S | re.M)


def examples(marker=RUN):
    path = os.path.join(os.environ["FZD_SOURCE_DIR"], "docs", "python.md")
    with open(path) as f:
        return marker.findall(f.read())


class Docs(fzdtest.DaemonTest):
    def test_examples_run(self):
        blocks = examples()
        self.assertEqual(len(blocks), 3, "docs/python.md: the python run blocks")
        out = []
        with tempfile.TemporaryDirectory(prefix="fzd-docs-") as tmp:
            env = dict(os.environ, FZD_SOCKET=self.fzd.address, TMPDIR=tmp)
            for code in blocks:
                r = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp,
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(r.returncode, 0, code + "\n" + r.stdout + r.stderr)
                out.append(r.stdout)
        self.assertIn("11534404 -> ", out[0])
        self.assertIn("refused: EDTYPE", out[0])
        self.assertIn("on the cpu backend", out[1])
        self.assertIn("chain: quant(eb=0.0001,mode=rel)", out[1])
        self.assertIn("refused: EBOUND -4008", out[1])
        self.assertIn("FZD(pipeline=None, eb=0.01, mode='abs'", out[2])
        self.assertIn("chunk 2.1.1: ArchiveInfo(dtype='f32', shape=(1, 600, 1200)", out[2])


if __name__ == "__main__":
    fzdtest.main()
