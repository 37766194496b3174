#!/usr/bin/env python3
"""Median (and min-max) per impl/test/size of the CSV lines on stdin, as a
Markdown table with one column per implementation."""
import collections, statistics, sys

runs = collections.defaultdict(list)
impls = []
for line in sys.stdin:
    p = line.strip().split(",")
    if len(p) != 6:
        continue
    imp, _, test, size, value, unit = p
    try:
        v = float(value)
    except ValueError:
        continue
    if imp not in impls:
        impls.append(imp)
    runs[(test, int(size), unit)].append((imp, v))
print("| test | size | unit | " + " | ".join(impls) + " |")
print("|---|---:|---|" + "---:|" * len(impls))
for (test, size, unit), vals in sorted(runs.items()):
    cells = []
    for imp in impls:
        vs = sorted(v for i, v in vals if i == imp)
        if not vs:
            cells.append("")
            continue
        m = statistics.median(vs)
        fmt = (lambda x: f"{x/1e6:.2f}M") if unit == "msg/s" else (lambda x: f"{x:.3g}")
        cells.append(f"{fmt(m)} ({fmt(vs[0])}-{fmt(vs[-1])})" if len(vs) > 1 else fmt(m))
    print(f"| {test} | {size} | {unit} | " + " | ".join(cells) + " |")
