#!/usr/bin/env python3
"""Runs the examples of one document (README.md or docs/*.md), as a user who
installed fzd would run them.

A fenced block (its fence at the start of a line) runs when the word `run`
follows its language in the info string:

    ```sh run            the block is a shell script (sh -e; `bash run`: bash -e)
    ```python run        the block is run by python3
    ```c run:example.c   the block is written to example.c, for later blocks
                         (any language: `fortran run:prog.f90`, `json run:plans.json`)

All the run blocks of a document run in order, in one fresh scratch
directory, with:
- the build installed by `cmake --install` into a scratch prefix (so that an
  example finds the installed libraries the way the docs say: rpath or the
  documented pkg-config line), its bin/ first on PATH and its pkg-config
  directory on PKG_CONFIG_PATH;
- a real fzd started as a user starts one (`fzd --socket PATH`), its socket
  in the scratch directory and FZD_SOCKET naming it; it must stop cleanly on
  SIGTERM at the end;
- HDF5_PLUGIN_PATH at the built HDF5 plugin, PYTHONPATH at client/python,
  FZD_ENGINE_LIB at the built engine library, where the build has them;
- python3 the interpreter given with --python (one with numpy);
- Open MPI's mpirun allowed to run as root and to place more ranks than
  cores, as a CI machine needs.

A block that fails (non-zero exit, or past its time limit) fails the test,
which prints the block, its line number and its output.

usage: run_docs.py --doc FILE --build DIR --source DIR --libdir DIR --python EXE
                   [--plugin-dir DIR] [--engine-lib FILE] [--keep]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^`]*)$")
BLOCK_TIMEOUT_S = 600


class Block:
    def __init__(self, line, lang, action, target, text):
        self.line = line      # 1-based line of the opening fence
        self.lang = lang
        self.action = action  # "run" or "write"
        self.target = target  # the file of a "write" block
        self.text = text


def parse_info(info):
    """(language, action, target) of an info string, or None when the block
    is not marked to run."""
    words = info.split()
    if len(words) < 2:
        return None
    lang = words[0]
    for w in words[1:]:
        if w == "run":
            return lang, "run", None
        if w.startswith("run:"):
            target = w[4:]
            if not target or target.startswith("/") or ".." in target.split("/"):
                raise SystemExit("bad file name in info string %r" % info)
            return lang, "write", target
    return None


def blocks_of(path):
    """Every fenced block marked `run`, in order."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        start = i
        body = []
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(fence[0] * len(fence)) and close.strip(fence[0]) == "":
                break
            body.append(lines[i])
            i += 1
        else:
            raise SystemExit("%s:%d: the fence is never closed" % (path, start + 1))
        i += 1
        marked = parse_info(info)
        if marked is None:
            continue
        lang, action, target = marked
        if action == "run" and lang not in ("sh", "bash", "python", "python3"):
            raise SystemExit("%s:%d: cannot run a block of %r (sh, bash or python; "
                             "or run:FILE to write it)" % (path, start + 1, lang))
        found.append(Block(start + 1, lang, action, target, "\n".join(body) + "\n"))
    return found


def install(build, prefix, log):
    """`cmake --install` of the whole build into prefix (DESTDIR keeps the
    absolute paths of the configuration, /etc/fzd, inside the scratch
    directory too)."""
    env = dict(os.environ, DESTDIR=os.path.join(os.path.dirname(prefix), "destdir"))
    r = subprocess.run(["cmake", "--install", build, "--prefix", "/opt/fzd"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(log, "w") as f:
        f.write(r.stdout)
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        raise SystemExit("FAIL: cmake --install %s exited %d" % (build, r.returncode))
    os.symlink(os.path.join(env["DESTDIR"], "opt", "fzd"), prefix)


def start_fzd(scratch, env):
    sock = os.path.join(scratch, "fzd.sock")
    log = open(os.path.join(scratch, "fzd.log"), "w")
    proc = subprocess.Popen(["fzd", "--socket", sock], cwd=scratch, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            log.close()
            sys.stdout.write(open(log.name).read())
            raise SystemExit("FAIL: fzd did not start (its log is above)")
        time.sleep(0.05)
    return proc, sock, log


def stop_fzd(proc, log):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "killed after 60 s"
    log.close()
    if rc != 0:
        sys.stdout.write(open(log.name).read())
        return "fzd exited with status %s after SIGTERM (its log is above)" % rc
    return None


def show(doc, block, out, why):
    print("FAIL: %s:%d: the %s block %s" % (doc, block.line, block.lang, why))
    print("---- the block (from line %d) ----" % block.line)
    sys.stdout.write(block.text)
    print("---- its output ----")
    sys.stdout.write(out)
    print("----")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--doc", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--plugin-dir")
    ap.add_argument("--engine-lib")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    a = ap.parse_args()

    doc = os.path.relpath(a.doc, a.source)
    blocks = blocks_of(a.doc)
    if not blocks:
        raise SystemExit("FAIL: %s has no block marked run" % doc)

    scratch = tempfile.mkdtemp(prefix="docs-", dir=os.environ.get("TMPDIR"))
    ok = False
    try:
        prefix = os.path.join(scratch, "prefix")
        install(a.build, prefix, os.path.join(scratch, "install.log"))
        work = os.path.join(scratch, "work")
        os.mkdir(work)
        tools = os.path.join(scratch, "tools")  # python3: the one with numpy
        os.mkdir(tools)
        python = shutil.which(a.python)
        if python is None:
            raise SystemExit("FAIL: no python3 at %r" % a.python)
        os.symlink(os.path.abspath(python), os.path.join(tools, "python3"))
        env = dict(os.environ)
        for k in ("FZD_SOCKET", "FZD_TOKEN", "PYTHONHOME", "CFLAGS", "LDFLAGS"):
            env.pop(k, None)
        env["PATH"] = os.pathsep.join([os.path.join(prefix, "bin"), tools, env.get("PATH", "")])
        env["PKG_CONFIG_PATH"] = os.path.join(prefix, a.libdir, "pkgconfig")
        env["PYTHONPATH"] = os.path.join(a.source, "client", "python")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["HOME"] = scratch
        env["TMPDIR"] = scratch
        # Open MPI's mpirun refuses root unless told, and places no more
        # ranks than it counts cores: CI machines run as root, on 2 cores.
        if os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
        if a.plugin_dir:
            env["HDF5_PLUGIN_PATH"] = a.plugin_dir
        if a.engine_lib:
            env["FZD_ENGINE_LIB"] = a.engine_lib
        proc, sock, log = start_fzd(scratch, env)
        env["FZD_SOCKET"] = "unix:" + sock
        failed = None
        try:
            for n, b in enumerate(blocks):
                if b.action == "write":
                    path = os.path.join(work, b.target)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(b.text)
                    continue
                script = os.path.join(scratch, "block-%d" % b.line)
                with open(script, "w", encoding="utf-8") as f:
                    f.write(b.text)
                if b.lang in ("python", "python3"):
                    cmd = ["python3", script]
                elif b.lang == "bash":
                    cmd = ["bash", "-e", script]
                else:
                    cmd = ["sh", "-e", script]
                t0 = time.monotonic()
                try:
                    r = subprocess.run(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, errors="replace", timeout=BLOCK_TIMEOUT_S)
                except subprocess.TimeoutExpired as e:
                    out = e.stdout or ""
                    if isinstance(out, bytes):
                        out = out.decode(errors="replace")
                    show(doc, b, out, "ran past %d s" % BLOCK_TIMEOUT_S)
                    failed = b
                    break
                if r.returncode != 0:
                    show(doc, b, r.stdout, "exited with status %d" % r.returncode)
                    failed = b
                    break
                print("ok: %s:%d (%s, %.1f s)" % (doc, b.line, b.lang, time.monotonic() - t0))
                for line in r.stdout.splitlines():
                    print("    " + line)
        finally:
            why = stop_fzd(proc, log)
        if failed is not None:
            raise SystemExit(1)
        if why:
            raise SystemExit("FAIL: " + why)
        ran = sum(1 for b in blocks if b.action == "run")
        print("%s: %d blocks run, %d files written, all ok" % (doc, ran, len(blocks) - ran))
        ok = True
    finally:
        if ok and not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print("scratch directory kept: %s" % scratch)


if __name__ == "__main__":
    main()
