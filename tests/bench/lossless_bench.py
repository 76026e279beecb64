#!/usr/bin/python3
"""Lossless ratio and speed: fzd's engine beside numcodecs' Zstd and Blosc.

Usage: /usr/bin/python3 tests/bench/lossless_bench.py BUILD_DIR FIELD_DIR [PRESETS]

BUILD_DIR holds tests/bench/fz_lossless_bench (a build of this tree);
FIELD_DIR the fields that ../shared/data/get-fields.sh (or any
NAME_D0xD1...f32 files) wrote; PRESETS the fzd pipelines to run, comma
separated (default lossless-ratio,lossless).  Each case is run in one
process and timed as the best of three runs, one thread: the engine's
compress and decompress through fz_lossless_bench, which checks that every
byte came back (the run fails otherwise), and numcodecs.Zstd(level=3) and
numcodecs.Blosc(cname='zstd', clevel=5, shuffle=SHUFFLE) (numcodecs'
defaults but the codec) in this interpreter, their round trips checked too.
The inputs: every f32 field, integer data made from them (i16 elevations
rounded to whole units, i16 temperatures in hundredths, i32 temperatures in
thousandths), and random data (u8, i16, i32, f32 with every bit random; i16 and i32 in a
small range).
Prints a Markdown table: ratio (raw bytes / stored bytes) and MB/s of
each coder; "growth" is the archive's bytes over the input's where fzd's
ratio is below 1.

Needs numpy and numcodecs: Debian's python3-numpy and python3-numcodecs
(tests/deps.sh installs both), or a virtual environment with them.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from numcodecs import Blosc, Zstd


def shape_of(path):
    dims = os.path.basename(path).rsplit('_', 1)[1].split('.')[0]
    return tuple(int(d) for d in dims.split('x'))


def inputs(field_dir):
    """(name, array) of every case, in a fixed order; random data seeded."""
    fields = sorted(glob.glob(os.path.join(field_dir, '*.f32')))
    if not fields:
        sys.exit(f'no NAME_D0xD1...f32 fields in {field_dir}')
    cases = []
    by_name = {}
    for f in fields:
        a = np.fromfile(f, dtype='<f4').reshape(shape_of(f))
        name = os.path.basename(f)[:-4]
        by_name[name.split('_')[0]] = a
        cases.append((name, a))
    # Integer data as instruments and models store it: elevations in whole
    # units, temperatures in hundredths and thousandths of a kelvin.
    if 'trinidad' in by_name:
        cases.append(('trinidad i16 (rounded)', np.rint(by_name['trinidad']).astype('<i2')))
    if 'vinth2p' in by_name:
        cases.append(('vinth2p i16 (T x 100)', np.rint(by_name['vinth2p'] * 100).astype('<i2')))
    if 'rectilinear' in by_name:
        t = [a for n, a in cases if n.startswith('rectilinear_grid_3D_t_')]
        if t:
            cases.append(('rectilinear t i32 (T x 1000)', np.rint(t[0] * 1000).astype('<i4')))
    rng = np.random.default_rng(26)
    n = 1 << 20
    cases.append(('random u8', rng.integers(0, 256, n, dtype=np.uint8)))
    cases.append(('random i16', rng.integers(-2**15, 2**15, n, dtype=np.int16).astype('<i2')))
    cases.append(('random i32', rng.integers(-2**31, 2**31, n, dtype=np.int32).astype('<i4')))
    cases.append(('random f32 bits', rng.integers(0, 2**32, n, dtype=np.uint32).view('<f4')))
    # Random integers in a small range: the high bytes are zero.
    cases.append(('random i16 in [0, 100)', rng.integers(0, 100, n, dtype=np.int16).astype('<i2')))
    cases.append(('random i32 in [0, 1000)', rng.integers(0, 1000, n, dtype=np.int32).astype('<i4')))
    return cases


DTYPES = {'float32': 'f32', 'int16': 'i16', 'int32': 'i32', 'uint8': 'u8'}


def fzd_case(binary, preset, a, tmp):
    path = os.path.join(tmp, 'in.raw')
    a.tofile(path)
    shape = 'x'.join(str(d) for d in a.shape)
    out = subprocess.run([binary, '-r', '3', '-t', '1', '-p', preset, DTYPES[a.dtype.name],
                          shape, path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f'fz_lossless_bench {preset} failed: {out.stderr.strip()}')
    r = json.loads(out.stdout)
    if not r['exact']:
        sys.exit(f'{preset} did not round-trip')
    return r['archive'], r['compress_s'], r['decompress_s']


def numcodecs_case(codec, a):
    raw = a.tobytes()
    tc = td = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        enc = codec.encode(raw)
        t1 = time.perf_counter()
        dec = codec.decode(enc)
        t2 = time.perf_counter()
        tc, td = min(tc, t1 - t0), min(td, t2 - t1)
    if bytes(dec) != raw:
        sys.exit(f'{codec} did not round-trip')
    return len(enc), tc, td


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    binary = os.path.join(sys.argv[1], 'tests', 'bench', 'fz_lossless_bench')
    presets = (sys.argv[3] if len(sys.argv) == 4 else 'lossless-ratio,lossless').split(',')
    coders = [(p, None) for p in presets] + [
        ('Zstd(3)', Zstd(level=3)),
        ('Blosc(zstd, shuffle)', Blosc(cname='zstd', clevel=5, shuffle=Blosc.SHUFFLE))]
    head = ' | '.join(f'{c} ratio | MB/s c/d' for c, _ in coders)
    print(f'| input | dtype | MB | {head} | {presets[0]} vs best peer |')
    print('|---|---|---|' + '---|---|' * len(coders) + '---|')
    worst = None
    with tempfile.TemporaryDirectory() as tmp:
        for name, a in inputs(sys.argv[2]):
            raw = a.nbytes
            cells, ratios = [], []
            for c, codec in coders:
                size, tc, td = (fzd_case(binary, c, a, tmp) if codec is None
                                else numcodecs_case(codec, a))
                ratios.append(raw / size)
                cells.append(f'{raw / size:.3f} | {raw / tc / 1e6:.0f} / {raw / td / 1e6:.0f}')
            peer = max(ratios[len(presets):])
            rel = ratios[0] / peer
            worst = rel if worst is None else min(worst, rel)
            note = f'{rel:.4f}x'
            if ratios[0] < 1:
                note += f', growth {100 * (1 / ratios[0] - 1):.4f}%'
            print(f'| {name} | {a.dtype.name} | {raw / 1e6:.1f} | ' + ' | '.join(cells) +
                  f' | {note} |', flush=True)
    print(f'\n{presets[0]}: lowest ratio against the better of Zstd(3) and Blosc: {worst:.4f}x')


if __name__ == '__main__':
    main()
