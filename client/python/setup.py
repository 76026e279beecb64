"""Builds the package's native parts; the metadata is in pyproject.toml.

* fzd/_libfzengine*.so: the fzd engine (engine/src, with the flat calls of
  src/fzflat.c) that fzd loads with ctypes to compress and decompress in
  this process.  It is compiled with the flags CMake gives the engine
  (-O3, -ffp-contract=off, -fno-fast-math, C11), which the archives'
  byte identity with the daemon's depends on, and exports fz.h's API only.
* fzd/plugins/libh5z_fzd.so (and libh5z_fzd_legacy.so, which reads files
  written with the old filter id): the HDF5 filter plugin, from
  client/hdf5/*.c with the engine, and with libfzclient (client/src,
  proto/src) where msgpack-c's header is found, else H5Z_FZD_ENGINE_ONLY
  (decode and encode in process).  A plugin that does not build leaves
  the package without it, and says why.

In the fzd source tree the package lives at client/python and the C
sources at ../..; an sdist carries copies of them under native/.  The
version header fz_version.h, which CMake generates, is written from
fzd/_version.py.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
# The source folders an sdist carries (relative to the fzd tree's root).
NATIVE_DIRS = ("engine", "client/hdf5", "client/src", "client/include", "proto/include",
               "proto/src")

# CMake's flags for the engine (top-level and engine/CMakeLists.txt, a
# RelWithDebInfo build): IEEE-exact arithmetic and the optimisation the
# stage loops are written for.
CFLAGS = ["-std=c11", "-O3", "-g", "-DNDEBUG", "-fPIC", "-pthread", "-ffp-contract=off",
          "-fno-fast-math", "-D_GNU_SOURCE", "-Wall", "-Wextra"]


def source_root():
    bundled = os.path.join(HERE, "native")
    if os.path.isfile(os.path.join(bundled, "engine", "CMakeLists.txt")):
        return bundled
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    if os.path.isfile(os.path.join(root, "engine", "CMakeLists.txt")):
        return root
    sys.exit("fzd: the engine's sources are not here: build from the fzd source tree "
             "(pip install ./client/python) or from its sdist")


def engine_sources(root):
    """The engine's sources as engine/CMakeLists.txt lists them (the set()
    of FZ_ENGINE_SOURCES), so that this build and CMake's never differ."""
    with open(os.path.join(root, "engine", "CMakeLists.txt")) as f:
        text = f.read()
    m = re.search(r"set\(FZ_ENGINE_SOURCES\s+([^)]*)\)", text)
    if not m:
        sys.exit("fzd: engine/CMakeLists.txt has no set(FZ_ENGINE_SOURCES ...)")
    names = [w for w in m.group(1).split() if w.endswith(".c")]
    return [os.path.join(root, "engine", n) for n in names]


def frames_sources(root):
    """The frames sources (fz_frames.h) engine/CMakeLists.txt appends when
    it finds liblz4 and libzstd, and the libraries they need; ([], []) when
    their headers are not here (the package then has no in-process frames:
    fzd.frames.decode says so)."""
    with open(os.path.join(root, "engine", "CMakeLists.txt")) as f:
        text = f.read()
    m = re.search(r"list\(APPEND FZ_ENGINE_SOURCES\s+([^)]*)\)", text)
    have = m is not None and all(os.path.exists(os.path.join("/usr/include", h))
                                 for h in ("lz4.h", "zstd.h"))
    if not have:
        return [], []
    names = [w for w in m.group(1).split() if w.endswith(".c")]
    return [os.path.join(root, "engine", n) for n in names], ["-llz4", "-lzstd"]


def version():
    ns = {}
    with open(os.path.join(HERE, "fzd", "_version.py")) as f:
        exec(f.read(), ns)
    return ns["__version__"]


def compiler():
    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) or cc


class BuildNative(build_ext):
    """Compiles the C sources with the engine's flags (not Python's, which
    are an extension module's) and links the two libraries."""

    def run(self):
        root = source_root()
        tmp = os.path.abspath(self.build_temp)
        inc = os.path.join(tmp, "include")
        os.makedirs(inc, exist_ok=True)
        major, minor, patch = version().split(".")
        with open(os.path.join(inc, "fz_version.h"), "w") as f:
            f.write("/* fz_version.h, written by client/python/setup.py. */\n"
                    "#ifndef FZ_VERSION_H\n#define FZ_VERSION_H\n"
                    "#define FZ_VERSION_MAJOR %s\n#define FZ_VERSION_MINOR %s\n"
                    "#define FZ_VERSION_PATCH %s\n#define FZ_VERSION_STRING \"%s.%s.%s\"\n"
                    "#endif\n" % (major, minor, patch, major, minor, patch))
        self.cc = compiler()
        # Every folder of engine/ that holds headers (include/, src/, and
        # any the engine adds), as CMake's include folders of fzengine.
        engine_dir = os.path.join(root, "engine")
        self.includes = ["-I" + inc] + [
            "-I" + os.path.join(engine_dir, d) for d in sorted(os.listdir(engine_dir))
            if os.path.isdir(os.path.join(engine_dir, d)) and
            any(n.endswith(".h") for n in os.listdir(os.path.join(engine_dir, d)))]
        out_dir = os.path.join(HERE if self.inplace else os.path.abspath(self.build_lib), "fzd")
        engine = self.compile(engine_sources(root), os.path.join(tmp, "engine"))
        # The frames codec goes into the engine library only (the plugins
        # do not use it), with fzflat.c's frames calls and liblz4, libzstd.
        fsrc, flibs = frames_sources(root)
        frames = self.compile(fsrc, os.path.join(tmp, "frames")) if fsrc else []
        shim = self.compile([os.path.join(HERE, "src", "fzflat.c")], os.path.join(tmp, "shim"),
                            ["-I" + os.path.join(HERE, "src")] +
                            (["-DFZFLAT_FRAMES"] if fsrc else []))
        lib = self.get_ext_fullpath("fzd._libfzengine")
        if self.inplace:
            lib = os.path.join(out_dir, os.path.basename(lib))
        self.link(engine + frames + shim, lib, os.path.join(HERE, "src", "fzengine.map"), flibs)
        self.plugins(root, tmp, engine, os.path.join(out_dir, "plugins"))

    def compile(self, sources, obj_dir, extra=()):
        os.makedirs(obj_dir, exist_ok=True)

        def one(src):
            obj = os.path.join(obj_dir, os.path.basename(src)[:-2] + ".o")
            cmd = [self.cc] + CFLAGS + self.includes + list(extra) + ["-c", src, "-o", obj]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise CompileError("%s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
            return obj

        with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
            return list(ex.map(one, sources))

    def link(self, objs, out, version_script, libs=()):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cmd = ([self.cc, "-shared", "-pthread", "-o", out] + objs +
               ["-Wl,--version-script=" + version_script, "-Wl,--no-undefined"] +
               list(libs) + ["-lm"])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError("%s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
        print("fzd: built %s" % out)

    def plugins(self, root, tmp, engine, out_dir):
        hdf5 = os.path.join(root, "client", "hdf5")
        sources = sorted(os.path.join(hdf5, n) for n in os.listdir(hdf5) if n.endswith(".c"))
        include = "-I" + os.path.join(root, "client", "include")
        extra, objs, libs = [include, "-I" + hdf5, "-fvisibility=hidden"], [], ["-ldl"]
        try:
            msgpack = subprocess.run([self.cc, "-E", "-x", "c", "-", "-o", os.devnull],
                                     input="#include <msgpack.h>\n", capture_output=True,
                                     text=True).returncode == 0
            if msgpack:
                client = [os.path.join(root, "client", "src", n) for n in
                          sorted(os.listdir(os.path.join(root, "client", "src")))
                          if n.endswith(".c") and n != "device.c"]
                proto = [os.path.join(root, "proto", "src", n) for n in
                         sorted(os.listdir(os.path.join(root, "proto", "src")))
                         if n.endswith(".c")]
                objs = self.compile(client + proto, os.path.join(tmp, "client"),
                                    [include, "-I" + os.path.join(root, "proto", "include"),
                                     "-I" + os.path.join(root, "client", "src"),
                                     "-fvisibility=hidden", "-DFZCLIENT_BUILDING"])
                libs.append("-lmsgpack-c" if self.has_lib("msgpack-c") else "-lmsgpackc")
                how = "with libfzclient: a daemon encodes when one answers"
            else:
                extra.append("-DH5Z_FZD_ENGINE_ONLY")
                how = "engine only: msgpack-c's msgpack.h is not installed"
            for name, defs in (("libh5z_fzd.so", []), ("libh5z_fzd_legacy.so",
                                                        ["-DH5Z_FZD_LEGACY"])):
                plugin = self.compile(sources, os.path.join(tmp, name[:-3]), extra + defs)
                self.link(plugin + objs + engine, os.path.join(out_dir, name),
                          os.path.join(hdf5, "h5z_fzd.map"), libs)
            print("fzd: HDF5 filter plugin built (%s)" % how)
        except CompileError as e:
            # The package works without the plugin: say why it is missing.
            print("fzd: WARNING: the HDF5 filter plugin was not built; fzd installs without "
                  "it.  The compiler said:\n%s" % e, file=sys.stderr)

    def has_lib(self, name):
        r = subprocess.run([self.cc, "-shared", "-o", os.devnull, "-l" + name],
                           capture_output=True)
        return r.returncode == 0


class CompileError(Exception):
    pass


class SdistNative(sdist):
    """An sdist that builds anywhere: it carries the C sources the package
    compiles (copied from the fzd tree into native/)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = source_root()
        for d in NATIVE_DIRS:
            shutil.copytree(os.path.join(root, d), os.path.join(base_dir, "native", d),
                            ignore=shutil.ignore_patterns("*.o", "__pycache__"))


setup(
    # One placeholder extension makes the wheel platform-specific; BuildNative
    # builds the libraries in its place.
    ext_modules=[Extension("fzd._libfzengine", sources=[])],
    cmdclass={"build_ext": BuildNative, "sdist": SdistNative},
)
