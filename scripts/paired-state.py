#!/usr/bin/env python3
"""Paired comparison of oxmpi and one anchor within one machine state.

This VM's two cores change state from launch to launch (see docs/performance.md,
"Runs split by machine state"): the probe's half round trip is about 50 ns in the
usual state and 150 ns or more in the slow one. A whole-run median then depends on which state each run drew.
This script compares within a state: it waits until the probe (half a cache-line
round trip between cores 0 and 1, `oxmpi-bench state`) is in the
wanted band, runs A B A (oxmpi, anchor, oxmpi; the next triple B A B), probes after
every run, and keeps a triple only if every probe stayed in the band. It prints the
oxmpi/anchor ratio of each kept triple (each side's mean) and, per size, the geometric
mean of the ratios with a 95% confidence interval.

Usage (after `.ci/run`, which builds the anchors under target/bench):
  scripts/paired-state.py --state slow --transport tcp --test bw \\
      --sizes 1048576,4194304 --anchor mpich5 --minutes 14
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = os.path.join(ROOT, "target")
# Bands of the probe's half round trip in microseconds, as the report names them
# (report::state_band): "below 35 ns", "35 to 150 ns", "above 150 ns".
BANDS = {"low": (0.0, 0.035), "usual": (0.035, 0.150001), "slow": (0.150001, 1e9)}


def probe():
    out = subprocess.run(
        [os.path.join(T, "release", "oxmpi-bench"), "state"],
        capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[0] == "cacheline":
            return float(f[2])
    sys.exit("paired-state: no cacheline line from oxmpi-bench state:\n" + out)


def command(who, transport, test, sizes):
    env = dict(os.environ)
    if who == "oxmpi":
        c = [os.path.join(T, "release", "oxmpirun"), "-n", "2", "--bind-to", "core"]
        if transport == "tcp":
            c += ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
        c += [os.path.join(T, "bench", "build", "oxmpi-c", "oxbench")]
    elif who == "ompi5":
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        c = [os.path.join(T, "bench", "venv-ompi5", "bin", "mpirun"), "-np", "2",
             "--bind-to", "core", "--map-by", "core"]
        if transport == "tcp":
            c += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                  "--mca", "btl_tcp_if_include", "lo"]
        c += [os.path.join(T, "bench", "build", "ompi5", "oxbench")]
    elif who == "mpich5":
        if transport == "tcp":
            env.update(MPIR_CVAR_NOLOCAL="1", MPIR_CVAR_CH4_NETMOD="ofi",
                       FI_PROVIDER="tcp", FI_TCP_IFACE="lo")
        c = [os.path.join(T, "bench", "venv-mpich5", "bin", "mpiexec"), "-n", "2",
             "-bind-to", "core", os.path.join(T, "bench", "build", "mpich5", "oxbench")]
    else:
        sys.exit(f"paired-state: unknown implementation {who}")
    return c + [test, "-s", sizes], env


def run(cmd):
    c, env = cmd
    out = subprocess.run(c, capture_output=True, text=True, env=env, timeout=300)
    got = {}
    for line in out.stdout.splitlines():
        f = line.split(",")
        if len(f) >= 4 and f[1].isdigit():
            got[int(f[1])] = float(f[2])
    if not got:
        sys.exit(f"paired-state: {' '.join(c)} printed nothing:\n{out.stderr[-2000:]}")
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", choices=BANDS, default="slow")
    ap.add_argument("--transport", choices=["shm", "tcp"], default="tcp")
    ap.add_argument("--test", default="bw")
    ap.add_argument("--sizes", default="1048576,4194304")
    ap.add_argument("--anchor", choices=["ompi5", "mpich5"], default="mpich5")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--lower-is-better", action="store_true",
                    help="latency: report anchor/oxmpi, so that above 1 is oxmpi ahead")
    a = ap.parse_args()
    lo, hi = BANDS[a.state]
    ox = command("oxmpi", a.transport, a.test, a.sizes)
    an = command(a.anchor, a.transport, a.test, a.sizes)
    inband = lambda us: lo <= us < hi
    ratios, dropped, flip = {}, 0, False
    end = time.time() + 60 * a.minutes
    while time.time() < end:
        if not inband(probe()):
            time.sleep(2)
            continue
        first, second = (an, ox) if flip else (ox, an)
        res, ok = [], True
        for cmd in (first, second, first):
            res.append(run(cmd))
            ok = ok and inband(probe())
        flip = not flip
        if not ok:
            dropped += 1
            continue
        oxs, ans = ([res[1]], [res[0], res[2]]) if first is an else ([res[0], res[2]], [res[1]])
        line = []
        for s in oxs[0]:
            o = statistics.mean(r[s] for r in oxs)
            b = statistics.mean(r[s] for r in ans)
            r = b / o if a.lower_is_better else o / b
            ratios.setdefault(s, []).append(r)
            line.append(f"{s}: oxmpi {o:.3f} {a.anchor} {b:.3f} ratio {r:.3f}")
        print("; ".join(line), flush=True)
    print(f"# state {a.state}, {a.transport} {a.test}, oxmpi against {a.anchor}: "
          f"{dropped} triples dropped (state changed)")
    for s, rs in sorted(ratios.items()):
        lg = [math.log(x) for x in rs]
        m = statistics.mean(lg)
        se = statistics.stdev(lg) / math.sqrt(len(lg)) if len(lg) > 1 else float("nan")
        print(f"{s}: {len(rs)} triples, geometric mean ratio {math.exp(m):.3f} "
              f"(95% CI {math.exp(m - 1.96 * se):.3f}-{math.exp(m + 1.96 * se):.3f}), "
              f"oxmpi ahead in {sum(r > 1 for r in rs)}")


if __name__ == "__main__":
    main()
