#!/usr/bin/env python3
"""ncu_hot.py - the hottest source lines of an Nsight Compute source export.

    ncu -i REPORT --page source --csv --print-source cuda > source.csv
    tests/gpu/ncu_hot.py source.csv [N] > hot.txt

The export holds one table per kernel and source file, each headed by a
row of column names; every table whose columns include warp stall samples
is ranked by them, and its N hottest lines (default 40) are printed with
their share of the table's samples.  Lines outside a table (kernel and
file names) are printed as they are, so each ranking says what it is of.
"""
import csv
import sys

STALL = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def flush(context, header, rows, top):
    if not rows:
        return
    col = header.index(STALL)
    ni = header.index(NOT_ISSUED) if NOT_ISSUED in header else None
    src = next((i for i, h in enumerate(header) if h.strip('"') in ("Source", "Source Code")), None)
    ex = next((i for i, h in enumerate(header) if h.startswith("Instructions Executed")), None)
    total = sum(number(r[col]) for r in rows)
    if total == 0:
        return
    print("\n## %s (%d lines, %.0f stall samples)" % (" / ".join(context[-3:]), len(rows), total))
    print("%6s %6s %8s %10s  %s" % ("line", "share", "samples", "executed", "source"))
    for r in sorted(rows, key=lambda r: -number(r[col]))[:top]:
        s = number(r[col])
        if s == 0:
            break
        text = r[src].strip()[:110] if src is not None else ""
        print("%6s %5.1f%% %8.0f %10s  %s%s" % (r[0], 100 * s / total, s,
                                               r[ex] if ex is not None else "-", text,
                                               "" if ni is None else "  [not issued %s]" % r[ni]))


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    context, header, rows = [], None, []
    with open(path, newline="", errors="replace") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if STALL in row:
                flush(context, header, rows, top)
                header, rows = row, []
            elif header is not None and len(row) == len(header):
                rows.append(row)
            else:
                flush(context, header, rows, top)
                header, rows = None, []
                context.append(",".join(row)[:160])
    flush(context, header, rows, top)


if __name__ == "__main__":
    main()
