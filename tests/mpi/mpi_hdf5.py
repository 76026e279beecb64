#!/usr/bin/env python3
"""MPI ranks writing one compressed HDF5 dataset in parallel through the
fzd of their GPU (docs/hdf5.md, "Parallel HDF5 with MPI"; docs/scaling.md).

Two real fzd daemons on the CPU backend stand in for the two GPUs of one
node, at DIR/gpu0.sock and DIR/gpu1.sock.  Four ranks (mpirun -np 4
--oversubscribe) find theirs through the address template
unix:DIR/gpu%l.sock with FZD_DAEMONS_PER_NODE=2, exactly as on a node with
two GPUs: the template takes Open MPI's node-local rank modulo 2, so ranks 0
and 2 use gpu0 and ranks 1 and 3 gpu1.  Nothing is faked: no wrapper sets a
rank's address, the library picks it.

  two-daemons   writer.c writes a time series collectively (parallel HDF5,
                the filter mandatory); each daemon's `fzctl stats` must
                count the chunks of its two ranks.  With both daemons
                stopped and FZD_HDF5_DAEMON=off, serial h5py reads the
                file and every value of "t" is checked against the bound
                (against "ref", the same values written unfiltered), and
                h5dump prints the same values.  The C and the Python
                examples of docs/hdf5.md run under the same template.
  dies-auto     gpu1 is killed (SIGKILL) after the first step, with the
                file open and every rank connected: its ranks go on with
                the embedded engine (the default, FZD_HDF5_DAEMON=auto),
                the write completes and reads back within the bound.
  dies-require  the same with FZD_HDF5_DAEMON=require: the ranks of gpu1
                print the filter's error (the connection reset) and end
                the job with MPI_Abort; mpirun exits non-zero well within
                the time limit, so no rank is left waiting inside HDF5's
                collective write.  Then a new file with gpu1 still dead:
                its ranks fail in H5Dcreate2 (HDF5 compresses a fill
                chunk there), naming gpu1's socket, and the job ends the
                same way.
  docs          docs/hdf5.md holds tests/mpi/parallel_write.c and
                parallel_write.py verbatim.

usage: mpi_hdf5.py CASE --fzd F --fzctl F --plugin-dir D --writer F --example F
                   --mpirun F --h5dump F --source D
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

STEPS = 6
NY, NX = 128, 256  # one rank's slab of a step (writer.c): one chunk
CHUNK_BYTES = NY * NX * 4
RUN_LIMIT_S = 60  # one mpirun; the writes take about a second


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Daemon:
    """One fzd on the CPU backend, as one GPU's daemon, started by the test
    and stopped with SIGTERM (it must exit 0) or killed."""

    def __init__(self, fzd, tmp, name):
        self.sock = os.path.join(tmp, name + ".sock")
        config = os.path.join(tmp, name + ".json")
        with open(config, "w") as f:
            json.dump({"socket_path": self.sock, "backend": "cpu", "workers": 1}, f)
        notify_path = os.path.join(tmp, name + ".notify")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(1)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        for k in ("LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC"):
            env.pop(k, None)
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([fzd, "--config", config], env=env, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        try:
            while True:
                check(self.proc.poll() is None,
                      "fzd %s exited with %r at start-up" % (name, self.proc.returncode))
                check(time.monotonic() < deadline, "fzd %s sent no READY=1" % name)
                try:
                    if "READY=1" in notify.recv(4096).decode().split("\n"):
                        break
                except socket.timeout:
                    pass
        finally:
            notify.close()
            os.unlink(notify_path)
        self.name = name

    def stats(self, fzctl):
        r = subprocess.run([fzctl, "-S", "unix:" + self.sock, "stats", "--json"],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "fzctl stats of %s: %s" % (self.name, r.stderr))
        return json.loads(r.stdout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=60)
            check(rc == 0, "fzd %s exited with %d after SIGTERM (log %s)"
                  % (self.name, rc, self.log_path))
        self.log.close()

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def mpi_env(a, tmp, daemon):
    """The ranks' environment: the plugin, the address template and the
    daemons per node; Open MPI told it may run as root (CI does) and place
    four ranks on two cores."""
    env = dict(os.environ)
    for k in ("FZD_SOCKET", "FZD_HDF5_DAEMON", "FZD_DAEMONS_PER_NODE"):
        env.pop(k, None)
    env.update(HDF5_PLUGIN_PATH=a.plugin_dir, FZD_SOCKET="unix:%s/gpu%%l.sock" % tmp,
               FZD_DAEMONS_PER_NODE="2", FZD_HDF5_DAEMON=daemon,
               OMPI_MCA_rmaps_base_oversubscribe="1",
               PYTHONPATH=os.path.join(a.source, "client", "python"))
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def mpirun(a, env, *cmd, gate=None, at_gate=None):
    """Runs cmd on four ranks; a run past RUN_LIMIT_S is a hang: its whole
    process group is killed and the test fails.  With gate, at_gate() is
    called once the writer waits there, and then the writer is let go."""
    argv = [a.mpirun, "-np", "4", "--oversubscribe", *cmd]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    t0 = time.monotonic()
    try:
        if gate:
            while not os.path.exists(gate + ".ready"):
                if proc.poll() is not None:
                    raise AssertionError("the writer ended before the gate:\n" +
                                         proc.stdout.read())
                check(time.monotonic() - t0 < RUN_LIMIT_S, "the writer never reached the gate")
                time.sleep(0.01)
            at_gate()
            open(gate + ".go", "w").close()
        out, _ = proc.communicate(timeout=max(1, RUN_LIMIT_S - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("%s hung: still running after %d s; its output:\n%s"
                             % (" ".join(argv), RUN_LIMIT_S, out))
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    return proc.returncode, out, time.monotonic() - t0


def read_back(a, path, steps):
    """Serial h5py (Debian's, HDF5 serial) with no daemon: every value of t
    within the bound of ref; the chunks stored compressed; h5dump agrees."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        check(not h5py.get_config().mpi, "the reader is meant to be serial h5py")
        t, ref = f["t"], f["ref"]
        eb = float(t.attrs["eb"])
        check(t.shape == (steps, 4 * NY, NX), "shape %r" % (t.shape,))
        check(t.id.get_create_plist().get_filter(0)[0] == 62160, "t is not fzd-filtered")
        x, y = ref[...].astype("f8"), t[...].astype("f8")
        stored = t.id.get_storage_size()
    err = np.abs(x - y)
    worst = float(err.max())
    check(int((err > eb).sum()) == 0,
          "%d values over the bound %g (max error %g)" % (int((err > eb).sum()), eb, worst))
    check(stored * 2 < x.size * 4, "t stored in %d bytes for %d: not compressed" %
          (stored, x.size * 4))
    r = subprocess.run([a.h5dump, "--enable-error-stack", "-y", "-m", "%.9g", "-d", "/t", "-s",
                        "%d,%d,0" % (steps - 1, 3 * NY), "-c", "1,1,6", path],
                       env=dict(os.environ, HDF5_PLUGIN_PATH=a.plugin_dir,
                                FZD_HDF5_DAEMON="off"),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "error" not in r.stdout.lower() + r.stderr.lower(),
          "h5dump failed: %s %s" % (r.stdout, r.stderr))
    # -y: the values alone, without their indices.
    body = r.stdout.split("DATA {", 1)[1].split("}", 1)[0]
    dumped = [float(v) for v in body.replace(",", " ").split()]
    # Nine digits name a float32 exactly: the two readers agree bit for bit.
    check(np.array_equal(np.array(dumped, "f4"), y[steps - 1, 3 * NY, :6].astype("f4")),
          "h5dump printed %r, h5py read %r" % (dumped, y[steps - 1, 3 * NY, :6].tolist()))
    print("read back with no daemon: %d values within %g (max error %.3g), %d bytes stored "
          "for %d (%.1fx), h5dump agrees" % (x.size, eb, worst, stored, x.size * 4,
                                             x.size * 4 / stored))


def compressed_chunks(st):
    c = st["compress"]
    return c["count"], c["bytes_in"]


def case_two_daemons(a, tmp):
    d0, d1 = Daemon(a.fzd, tmp, "gpu0"), Daemon(a.fzd, tmp, "gpu1")
    try:
        path = os.path.join(tmp, "series.h5")
        rc, out, secs = mpirun(a, mpi_env(a, tmp, "require"), a.writer, path, str(STEPS))
        print(out, end="")
        check(rc == 0, "the writer exited with %d" % rc)
        for d in (d0, d1):
            n, nbytes = compressed_chunks(d.stats(a.fzctl))
            # Two ranks' chunks, and HDF5's one fill chunk per rank when the
            # dataset is made (parallel HDF5 allocates chunks at creation).
            print("%s compressed %d chunks, %d bytes" % (d.name, n, nbytes))
            check(n >= 2 * STEPS and nbytes >= 2 * STEPS * CHUNK_BYTES,
                  "%s compressed %d chunks (%d bytes): fewer than its two ranks wrote (%d)"
                  % (d.name, n, nbytes, 2 * STEPS))
        print("4 ranks, 2 daemons, %.1f s" % secs)

        # The examples of docs/hdf5.md, run the same way.
        for cmd in ([a.example, os.path.join(tmp, "example_c.h5")],
                    [sys.executable, os.path.join(a.source, "tests", "mpi", "parallel_write.py"),
                     os.path.join(tmp, "example_py.h5")]):
            before = [compressed_chunks(d.stats(a.fzctl))[0] for d in (d0, d1)]
            rc, out, _ = mpirun(a, mpi_env(a, tmp, "require"), *cmd)
            print(out, end="")
            check(rc == 0, "%s exited with %d" % (os.path.basename(cmd[-2]), rc))
            after = [compressed_chunks(d.stats(a.fzctl))[0] for d in (d0, d1)]
            check(all(x > y for x, y in zip(after, before)),
                  "a daemon compressed nothing for %s: %r -> %r" % (cmd[-2], before, after))
    finally:
        d0.stop()
        d1.stop()
    read_back(a, path, STEPS)


def case_dies(a, tmp, setting):
    d0, d1 = Daemon(a.fzd, tmp, "gpu0"), Daemon(a.fzd, tmp, "gpu1")
    seen = {}

    def kill_gpu1():
        seen["gpu1"] = compressed_chunks(d1.stats(a.fzctl))[0]
        seen["gpu0"] = compressed_chunks(d0.stats(a.fzctl))[0]
        d1.kill()

    try:
        path = os.path.join(tmp, "dies.h5")
        gate = os.path.join(tmp, "gate")
        rc, out, secs = mpirun(a, mpi_env(a, tmp, setting), a.writer, path, str(STEPS), gate,
                               gate=gate, at_gate=kill_gpu1)
        print(out, end="")
        check(seen["gpu1"] >= 2, "gpu1 had compressed %d chunks before it died: its ranks did "
              "not use it" % seen["gpu1"])
        print("gpu1 killed after compressing %d chunks; mpirun exited %d after %.1f s"
              % (seen["gpu1"], rc, secs))
        if setting == "auto":
            check(rc == 0, "the write failed although the filter may compress in process")
            after = compressed_chunks(d0.stats(a.fzctl))[0]
            check(after >= seen["gpu0"] + 2 * (STEPS - 1),
                  "gpu0 compressed %d chunks after the gate, its ranks wrote %d"
                  % (after - seen["gpu0"], 2 * (STEPS - 1)))
        else:
            check(rc != 0, "the write succeeded although FZD_HDF5_DAEMON=require and the "
                  "daemon of ranks 1 and 3 is dead")
            errors = re.findall(r"fzd filter: fzd: (.*) \((E[A-Z]+)\)", out)
            check(errors and all(code in ("ECONNRESET", "EPIPE", "ECONNREFUSED")
                                 for _, code in errors),
                  "no clear error from the filter of a rank of gpu1 in:\n" + out)
            failed = set(int(r) for r in re.findall(r"rank (\d): step \d+: H5Dwrite of t failed",
                                                    out))
            check(failed and failed <= {1, 3}, "the ranks that failed: %r, not gpu1's (1, 3)"
                  % sorted(failed))
            # mpirun exits with the code the first rank gave MPI_Abort.
            check(rc == 2, "mpirun exited %d, not writer.c's MPI_Abort code 2" % rc)
            print("ranks %s reported %r and ended the job" % (sorted(failed), errors[0]))

            # gpu1 still dead when the next file is made: its ranks fail
            # already in H5Dcreate2, where HDF5 compresses a chunk of fill
            # values, and again no rank is left waiting.
            rc, out, secs = mpirun(a, mpi_env(a, tmp, setting), a.writer,
                                   os.path.join(tmp, "dead.h5"), str(STEPS))
            print(out, end="")
            check("cannot connect to '%s'" % d1.sock in out and "(ECONNREFUSED)" in out,
                  "no clear error naming gpu1's socket in:\n" + out)
            failed = set(int(r) for r in re.findall(r"rank (\d): H5Dcreate2 of t failed", out))
            check(failed and failed <= {1, 3}, "the ranks that failed to create the dataset: "
                  "%r, not gpu1's (1, 3)" % sorted(failed))
            check(rc == 2, "mpirun exited %d, not writer.c's MPI_Abort code 2" % rc)
            print("with gpu1 gone, ranks %s failed to create the dataset; mpirun exited %d "
                  "after %.1f s" % (sorted(failed), rc, secs))
    finally:
        d0.stop()
        if d1.proc.poll() is None:
            d1.stop()
    if setting == "auto":
        read_back(a, path, STEPS)


def case_docs(a):
    page = open(os.path.join(a.source, "docs", "hdf5.md")).read()
    found = dict(re.findall(r"<!-- example: (\S+) -->\n```[^\n]*\n(.*?)```\n", page, re.S))
    for name in ("parallel_write.c", "parallel_write.py"):
        check(name in found, "docs/hdf5.md does not include tests/mpi/%s" % name)
        with open(os.path.join(a.source, "tests", "mpi", name)) as f:
            check(found[name] == f.read(), "the %s of docs/hdf5.md differs from tests/mpi/%s"
                  % (name, name))
    print("docs/hdf5.md holds parallel_write.c and parallel_write.py verbatim")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=("two-daemons", "dies-auto", "dies-require", "docs"))
    for opt in ("fzd", "fzctl", "plugin-dir", "writer", "example", "mpirun", "h5dump", "source"):
        ap.add_argument("--" + opt)
    a = ap.parse_args()
    # This process reads with serial h5py: the plugin, no daemon.
    os.environ["HDF5_PLUGIN_PATH"] = a.plugin_dir or ""
    os.environ["FZD_HDF5_DAEMON"] = "off"
    if a.case == "docs":
        case_docs(a)
        return
    tmp = tempfile.mkdtemp(prefix="fzd-mpi-")
    ok = False
    try:
        if a.case == "two-daemons":
            case_two_daemons(a, tmp)
        else:
            case_dies(a, tmp, a.case.split("-")[1])
        ok = True
    finally:
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("files kept in %s" % tmp)
    print("ok")


if __name__ == "__main__":
    main()
