#!/usr/bin/env python3
"""ratio_bench.py - the ratio preset against balanced, fast and SZ3.

For every field (raw little-endian .f32 files whose names carry the shape,
slowest dimension first, as ../shared/data/get-fields.sh writes them) and
every value-range relative bound, this runs fzd's engine through
fz_cpu_bench (one thread) and SZ3 through the `pysz` package, and prints a
Markdown table of ratio, compress/decompress GB/s, max error over the bound
and PSNR, the ratio's share of SZ3's against the bars of issue 13, and
writes a rate-distortion picture (bits per value against PSNR) as SVG.

pysz is installed with pip into a virtual environment this script makes
(--venv, default build-ratio-bench-venv): a benchmark-only dependency,
never one of the product.  The SVG is written by hand, so the plot needs
nothing beyond the standard library.

--smooth3d ZxYxX adds a generated smooth 3-D field of that shape (slowest
first), standing for the very smooth fields (geopotential height) on
which the preset falls short: a vertical gradient, large-scale waves
that grow with height, and weather with an amplitude spectrum falling as
k^-2, 20 units in about 8,000; fixed seed, so every run sees the same
values.

Usage: ratio_bench.py --bench build-cpu/tests/bench/fz_cpu_bench \\
           [--venv DIR] [--bounds 1e-2,1e-3,1e-4] [--rd-bounds ...] \\
           [--repeat 3] [--svg docs/ratio_rd.svg] [--smooth3d ZxYxX] \\
           [FIELD.f32 ...]
Exit status: 0, 1 when any bound is exceeded (fzd or SZ3), 2 usage errors.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

BARS = {1e-2: 0.5, 1e-3: 0.8, 1e-4: 0.8}
PRESETS = ["ratio", "balanced", "fast"]


def ensure_venv(venv):
    """Re-executes this script inside a virtual environment with pysz."""
    py = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        subprocess.check_call([py, "-m", "pip", "install", "-q", "pysz", "numpy"])
    os.execv(py, [py] + sys.argv)


def shape_of(path):
    m = re.search(r"_(\d+(?:x\d+)*)\.f32$", os.path.basename(path))
    if not m:
        sys.exit(f"{path}: no shape in the name (NAME_D0xD1.f32)")
    return tuple(int(d) for d in m.group(1).split("x"))


def run_fzd(bench, field, bounds, repeat):
    """Rows of fz_cpu_bench: {(preset, bound): (ratio, c, d, err, psnr)}."""
    out = subprocess.run([bench, "-t", "1", "-r", str(repeat), "-p", ",".join(PRESETS),
                          "-e", ",".join(f"{b:g}" for b in bounds), field],
                         capture_output=True, text=True)
    if out.returncode == 2:
        sys.exit(out.stderr)
    rows = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 8 or cells[1] not in PRESETS:
            continue
        err = cells[6].split()
        rows[(cells[1], float(cells[2]))] = (float(cells[3]), float(cells[4]), float(cells[5]),
                                             float(err[0]), float(cells[7]),
                                             len(err) > 1)
    return rows


def run_sz3(x, bound, repeat):
    import numpy as np
    import pysz
    cfg = pysz.szConfig()
    cfg.errorBoundMode = pysz.szErrorBoundMode.REL
    cfg.relErrorBound = bound
    tc = td = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        comp, _ = pysz.sz.compress(x, cfg)
        t1 = time.perf_counter()
        y, _ = pysz.sz.decompress(comp, np.float32, x.shape)
        t2 = time.perf_counter()
        tc, td = min(tc, t1 - t0), min(td, t2 - t1)
    fin = np.isfinite(x)
    rng = float(x[fin].max()) - float(x[fin].min())
    d = x[fin].astype(np.float64) - y[fin].astype(np.float64)
    err = float(np.abs(d).max()) / (bound * rng)
    rmse = float(np.sqrt(np.mean(d * d)))
    psnr = 20 * np.log10(rng / rmse) if rmse > 0 else float("inf")
    return (x.nbytes / comp.nbytes, x.nbytes / tc / 1e9, x.nbytes / td / 1e9, err, psnr,
            err > 1)


def svg_plot(series, path):
    """series: {field: {name: [(bits, psnr), ...]}}: one panel per field."""
    colors = {"ratio": "#d62728", "balanced": "#1f77b4", "fast": "#2ca02c", "SZ3": "#000000"}
    fields = list(series)
    pw, ph, m = 300, 230, 45
    cols = min(3, len(fields))
    rows = (len(fields) + cols - 1) // cols
    W, H = cols * (pw + m) + m, rows * (ph + m) + 2 * m
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">'
           'Rate-distortion: bits per value against PSNR (REL bounds, f32)</text>']
    for k, f in enumerate(fields):
        ox, oy = m + (k % cols) * (pw + m), 2 * m + (k // cols) * (ph + m)
        pts = [p for s in series[f].values() for p in s if p[1] != float("inf")]
        xmax = max(p[0] for p in pts) * 1.05
        ylo, yhi = min(p[1] for p in pts) - 3, max(p[1] for p in pts) + 3

        def X(v):
            return ox + v / xmax * pw

        def Y(v):
            return oy + ph - (v - ylo) / (yhi - ylo) * ph
        out.append(f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" '
                   'stroke="#888"/>')
        out.append(f'<text x="{ox + pw / 2}" y="{oy - 6}" text-anchor="middle">{f}</text>')
        for i in range(5):
            xv, yv = xmax * i / 4, ylo + (yhi - ylo) * i / 4
            out.append(f'<text x="{X(xv):.1f}" y="{oy + ph + 13}" text-anchor="middle">'
                       f'{xv:.2f}</text>')
            out.append(f'<text x="{ox - 4}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.0f}</text>')
        out.append(f'<text x="{ox + pw / 2}" y="{oy + ph + 27}" text-anchor="middle">'
                   'bits per value</text>')
        out.append(f'<text x="{ox - 32}" y="{oy + ph / 2}" text-anchor="middle" '
                   f'transform="rotate(-90 {ox - 32} {oy + ph / 2})">PSNR dB</text>')
        for j, (name, s) in enumerate(series[f].items()):
            s = sorted(p for p in s if p[1] != float("inf"))
            pl = " ".join(f"{X(b):.1f},{Y(q):.1f}" for b, q in s)
            out.append(f'<polyline points="{pl}" fill="none" stroke="{colors[name]}" '
                       'stroke-width="1.5"/>')
            for b, q in s:
                out.append(f'<circle cx="{X(b):.1f}" cy="{Y(q):.1f}" r="2.5" '
                           f'fill="{colors[name]}"/>')
            out.append(f'<text x="{ox + pw - 60}" y="{oy + ph - 10 - 13 * j}" '
                       f'fill="{colors[name]}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def smooth3d(nz, ny, nx):
    """The generated smooth 3-D field (see the module's text), float32."""
    import numpy as np
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    base = (5000 + 120.0 * z + 300 * np.sin(x / 40 + 0.3) * np.cos(y / 33) * (1 + z / nz)
            + 50 * np.sin((x + y) / 70))
    freq = np.meshgrid(*[np.fft.fftfreq(n) for n in (nz, ny, nx)], indexing="ij")
    k = np.sqrt(sum(f * f for f in freq))
    k[0, 0, 0] = 1
    w = np.random.default_rng(7).standard_normal((nz, ny, nx))
    w = np.real(np.fft.ifftn(np.fft.fftn(w) * k ** -2.0))
    return (base + w * (20 / w.std())).astype("<f4")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="fz_cpu_bench")
    ap.add_argument("--venv", default="build-ratio-bench-venv")
    ap.add_argument("--bounds", default="1e-2,1e-3,1e-4")
    ap.add_argument("--rd-bounds", default="3e-2,1e-2,3e-3,1e-3,3e-4,1e-4,3e-5")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--svg", default="docs/ratio_rd.svg")
    ap.add_argument("--smooth3d", metavar="ZxYxX", help="add the generated smooth 3-D field")
    ap.add_argument("fields", nargs="*")
    a = ap.parse_args()
    if not a.fields and not a.smooth3d:
        ap.error("no field: give FIELD.f32 files or --smooth3d")
    ensure_venv(os.path.abspath(a.venv))
    import numpy as np

    if a.smooth3d:
        dims = [int(d) for d in a.smooth3d.split("x")]
        if len(dims) != 3 or min(dims) < 1:
            ap.error("--smooth3d takes ZxYxX, e.g. 64x128x256")
        tmp = tempfile.TemporaryDirectory(prefix="ratio-bench-")
        path = os.path.join(tmp.name, f"smooth3d_{a.smooth3d}.f32")
        smooth3d(*dims).tofile(path)
        a.fields.append(path)

    bounds = [float(b) for b in a.bounds.split(",")]
    rd = [float(b) for b in a.rd_bounds.split(",")]
    allb = sorted(set(bounds) | set(rd), reverse=True)
    failed = False
    print("| field | bound | ratio: ratio / balanced / fast / SZ3 | share of SZ3 (bar) "
          "| compress GB/s: ratio / SZ3 | decompress GB/s: ratio / SZ3 "
          "| max error / bound: ratio / SZ3 |")
    print("|---|---|---|---|---|---|---|")
    series = {}
    for f in a.fields:
        name = os.path.basename(f)[:-4]
        x = np.fromfile(f, dtype="<f4").reshape(shape_of(f))
        fz = run_fzd(a.bench, f, allb, a.repeat)
        sz = {b: run_sz3(x, b, a.repeat) for b in allb}
        s = series.setdefault(name, {p: [] for p in PRESETS + ["SZ3"]})
        for b in allb:
            for p in PRESETS:
                s[p].append((32 / fz[(p, b)][0], fz[(p, b)][4]))
            s["SZ3"].append((32 / sz[b][0], sz[b][4]))
            failed |= any(fz[(p, b)][5] for p in PRESETS) or sz[b][5]
        for b in bounds:
            r, z = fz[("ratio", b)], sz[b]
            share = r[0] / z[0]
            ok = "ok" if share >= BARS.get(b, 0.8) else "below"
            print(f"| {name} | {b:g} | {r[0]:.2f} / {fz[('balanced', b)][0]:.2f} / "
                  f"{fz[('fast', b)][0]:.2f} / {z[0]:.2f} | {share:.2f} ({BARS.get(b, 0.8)}: {ok}) "
                  f"| {r[1]:.3f} / {z[1]:.3f} | {r[2]:.3f} / {z[2]:.3f} "
                  f"| {r[3]:.3f} / {z[3]:.3f} |", flush=True)
    svg_plot(series, a.svg)
    print(f"\nrate-distortion picture: {a.svg}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
