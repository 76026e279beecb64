#!/usr/bin/env python3
"""Checks the shape of kernels/ and the contract between the CPU and the GPU.

Run by ctest (test_kernels_layout) in every build, the CPU-only ones
included, since it reads the sources only:

1. kernels/ does not reach into the engine's private files: no source
   includes a header that exists only in engine/src, and no CMake file of
   kernels/ names engine/src.
2. Every source of kernels/ lives in one of its rooms (README.md there maps
   them), and the rooms are layered: a file includes headers of its own
   room or of a room below it, never of one above or beside it.
3. The include graph has no circle.  A header and the source file of the
   same name (x.h and x.c or x.cu) are one node, so that a header declaring
   what its source defines ties the two together.
4. Every number of engine/include/fz_contract.h is written once: no other
   file of engine/ or kernels/ #defines a name of the contract's kinds
   (alphabet, code length, lanes, runs, steps, margin, levels) to a literal,
   and the decoder's literal rze level limit is gone.

usage: check_layout.py SOURCE_DIR
"""
import os
import re
import sys

# Rooms, lowest first; a room may include the rooms listed as below it.
BELOW = {
    "runtime": set(),
    "ops": set(),
    "stages": {"runtime", "ops"},
    "jit": {"runtime", "ops", "stages"},
    "api": {"runtime", "ops", "stages", "jit"},
    "frames": {"runtime", "ops", "stages"},
}
SOURCES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Names that hold one of the contract's numbers (fz_contract.h): a #define
# of such a name to a literal anywhere else is a second copy.
CONTRACT_KINDS = re.compile(
    r"^\s*#\s*define\s+((?:\w*_)?(?:SYMS|MAX_LEN|LANES|RUNS|COST_STEP|GUESS_STEP|MARGIN\w*"
    r"|PAIR_SPREAD|RZE\w*LEVELS|MAX_LEVELS|TOP|COST_DIRECT))\s+"
    r"\(?\s*[0-9]", re.M)
# Literal copies found once and removed: the GPU decoder's rze level limit.
LITERAL_COPIES = [re.compile(r"levels\s*<=\s*[0-9]")]


def fail(errors, msg):
    errors.append(msg)


def main(root):
    errors = []
    kroot = os.path.join(root, "kernels")
    eng_src = os.path.join(root, "engine", "src")
    eng_inc = os.path.join(root, "engine", "include")
    files = {}
    for d, _, names in os.walk(kroot):
        for n in names:
            if n.endswith(SOURCES):
                p = os.path.join(d, n)
                files[os.path.relpath(p, kroot)] = p
    by_name = {}
    for rel in files:
        by_name.setdefault(os.path.basename(rel), []).append(rel)
    for n, rels in by_name.items():
        if len(rels) > 1:
            fail(errors, "kernels: %s in several rooms: %s" % (n, ", ".join(rels)))

    def room(rel):
        top = rel.split(os.sep)[0]
        return top if top in BELOW or top == "include" else None

    # 1 and the CMake half of it.
    for d, _, names in os.walk(kroot):
        for n in names:
            if n == "CMakeLists.txt" or n.endswith(".cmake"):
                with open(os.path.join(d, n)) as f:
                    if "engine/src" in f.read():
                        fail(errors, "kernels/%s names engine/src" %
                             os.path.relpath(os.path.join(d, n), kroot))
    edges = {}
    for rel, path in sorted(files.items()):
        r = room(rel)
        if r is None:
            fail(errors, "kernels/%s is in no room (%s)" % (rel, ", ".join(BELOW)))
        with open(path, errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            name = os.path.basename(inc)
            if name in by_name:
                target = by_name[name][0]
                edges.setdefault(rel, set()).add(target)
                tr = room(target)
                if r and tr and tr != r and tr != "include" and tr not in BELOW.get(r, ()):
                    fail(errors, "kernels/%s (room %s) includes %s of room %s, not below it"
                         % (rel, r, name, tr))
            elif os.path.exists(os.path.join(eng_inc, name)):
                pass
            elif os.path.exists(os.path.join(eng_src, name)):
                fail(errors, "kernels/%s includes %s, a private header of engine/src"
                     % (rel, name))

    # 3: nodes merge x.h with x.c / x.cu.
    def node(rel):
        return os.path.splitext(rel)[0]

    graph = {}
    for a, targets in edges.items():
        for b in targets:
            if node(a) != node(b):
                graph.setdefault(node(a), set()).add(node(b))
    state = {}
    stack = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                cyc = stack[stack.index(w):] + [w]
                fail(errors, "kernels: include circle: " + " -> ".join(cyc))
            elif w not in state:
                visit(w)
        stack.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)

    # 4: the contract's numbers, once.
    contract = os.path.join(eng_inc, "fz_contract.h")
    with open(contract) as f:
        ctext = f.read()
    names = re.findall(r"^#define\s+(FZE_\w+)\s", ctext, re.M)
    for want in ("FZE_HUFF_SYMS", "FZE_HUFF_MAX_LEN", "FZE_GUESS_MARGIN_NUM",
                 "FZE_GUESS_MARGIN_DEN", "FZE_COST_STEP", "FZE_GUESS_STEP",
                 "FZE_RZE_MAX_LEVELS"):
        if want not in names:
            fail(errors, "engine/include/fz_contract.h does not define %s" % want)
    for top in ("engine", "kernels"):
        for d, _, fnames in os.walk(os.path.join(root, top)):
            for n in fnames:
                p = os.path.join(d, n)
                if not n.endswith(SOURCES) or os.path.samefile(p, contract):
                    continue
                with open(p, errors="replace") as f:
                    text = f.read()
                rel = os.path.relpath(p, root)
                for m in CONTRACT_KINDS.finditer(text):
                    fail(errors, "%s: #define %s to a literal: a second copy of a "
                         "number of fz_contract.h (define it from the contract's)"
                         % (rel, m.group(1)))
                for cname in names:
                    if re.search(r"^\s*#\s*define\s+%s\b" % cname, text, re.M):
                        fail(errors, "%s defines %s again" % (rel, cname))
                if top == "kernels":
                    for pat in LITERAL_COPIES:
                        for m in pat.finditer(text):
                            fail(errors, "%s: literal limit '%s': use FZE_RZE_MAX_LEVELS"
                                 % (rel, m.group(0)))
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print("kernels: %d files in %d rooms, %d include edges, no circle; "
              "fz_contract.h's %d numbers written once" %
              (len(files), len(BELOW), sum(len(v) for v in edges.values()), len(names)))
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
