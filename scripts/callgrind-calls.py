#!/usr/bin/env python3
"""Per-call inclusive cost of functions in a callgrind output file.

Usage: callgrind-calls.py callgrind.out FUNC [FUNC ...]

For each FUNC (a symbol name, e.g. PMPI_Isend), sums over every call site
the number of calls and the inclusive cost of those calls (the first event,
Ir, unless the file's first event is something else) and prints
`FUNC calls ir_per_call`. Recursive and cycle-internal calls are counted
as callgrind records them.
"""
import re
import sys


def main():
    path, funcs = sys.argv[1], sys.argv[2:]
    names = {}  # compressed id -> name, per kind ("fn" shares ids with "cfn")
    calls = {f: 0 for f in funcs}
    cost = {f: 0 for f in funcs}
    pending = None  # (name, count) from the last calls= line
    cur_cfn = None

    def resolve(spec):
        m = re.match(r"\((\d+)\)(?: (.*))?", spec)
        if not m:
            return spec
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
            return m.group(2)
        return names.get(m.group(1), spec)

    with open(path) as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("fn="):
                resolve(line[3:])
                cur_cfn = None
            elif line.startswith("cfn="):
                cur_cfn = resolve(line[4:])
            elif line.startswith("calls="):
                count = int(line[6:].split()[0])
                pending = (cur_cfn, count)
            elif pending is not None and line and (line[0].isdigit() or line[0] in "+-*"):
                name, count = pending
                pending = None
                parts = line.split()
                if name in calls and len(parts) > 1:
                    calls[name] += count
                    cost[name] += int(parts[1])
    for f in funcs:
        per = cost[f] / calls[f] if calls[f] else float("nan")
        print(f"{f} {calls[f]} {per:.1f}")


if __name__ == "__main__":
    main()
