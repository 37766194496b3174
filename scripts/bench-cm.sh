#!/usr/bin/env bash
# The cm path side by side (issue 36's benchmark): 8-byte latency and 1 MiB
# bandwidth of the anchors' C programs (../shared/anchors/bench) between 2
# ranks pinned to 2 cores, on one libfabric provider at a time:
#   oxmpi   --mca pml cm (ofi MTL), on Debian's libfabric and on the one
#           MPICH's wheel bundles (the anchors' own libfabric)
#   mpich5  ch4:ofi, MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=<prov>
#   ompi5   --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include <prov>
#   fi_pingpong -e rdm -m tagged: libfabric's own floor (one-way time of a
#           ping-pong: half its round trip, as the MPI latency programs)
# Rounds are interleaved; the script prints every run and the medians.
# Usage: scripts/bench-cm.sh [rounds] [providers]   (default 3 "tcp shm")
# Needs: scripts/build-capi.sh release; the venvs of oxmpi-bench compare
# (target/bench/venv-{mpich5,ompi5}); libfabric-bin.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-3}
provs=${2:-tcp shm}
ox=$PWD/target/oxmpi
mpich=$PWD/target/bench/venv-mpich5
ompi=$PWD/target/bench/venv-ompi5
anch=${ANCHORS:-$PWD/../shared/anchors/bench}
l25=$mpich/lib/mpich/libfabric.so.1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$anch"/*.c "$anch"/*.h "$work"/
cd "$work"
"$ox/bin/mpicc" -O2 -o lat_ox latency.c && "$ox/bin/mpicc" -O2 -o bw_ox bw.c
"$mpich/bin/mpicc" -O2 -o lat_mpich latency.c && "$mpich/bin/mpicc" -O2 -o bw_mpich bw.c
"$ompi/bin/mpicc" -O2 -o lat_ompi latency.c && "$ompi/bin/mpicc" -O2 -o bw_ompi bw.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pick() { # size column from the programs' CSV lines: test,size,value
    awk -F, -v s="$1" '$4 == s { print $5; exit }'
}
run_impl() { # impl prov test -> value
    local impl=$1 prov=$2 t=$3 size=8 prog
    [ "$t" = bw ] && size=1048576
    case $impl in
    oxmpi-deb) prog=./${t/latency/lat}_ox
        timeout 300 "$ox/bin/oxmpirun" -n 2 --mca pml cm --mca mtl_ofi_provider_include "$prov" \
            $prog 2>/dev/null | pick $size ;;
    oxmpi-2.5) prog=./${t/latency/lat}_ox
        timeout 300 "$ox/bin/oxmpirun" -n 2 --mca pml cm --mca mtl_ofi_provider_include "$prov" \
            --mca mtl_ofi_library "$l25" $prog 2>/dev/null | pick $size ;;
    mpich5) prog=./${t/latency/lat}_mpich
        timeout 300 "$mpich/bin/mpiexec" -n 2 -bind-to core env MPIR_CVAR_NOLOCAL=1 \
            MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER="$prov" FI_TCP_IFACE=lo $prog 2>/dev/null | pick $size ;;
    ompi5) prog=./${t/latency/lat}_ompi
        timeout 300 "$ompi/bin/mpirun" -np 2 --bind-to core --map-by core --mca pml cm \
            --mca mtl ofi --mca mtl_ofi_provider_include "$prov" $prog 2>/dev/null | pick $size ;;
    fi_pingpong)
        local lib=$(dirname "$l25") args=(-p "$prov" -e rdm -m tagged -I 20000 -S 8)
        [ "$t" = bw ] && args=(-p "$prov" -e rdm -m tagged -I 500 -S 1048576)
        LD_LIBRARY_PATH=$lib taskset -c 0 fi_pingpong "${args[@]}" >/dev/null 2>&1 &
        local srv=$!
        sleep 0.5
        local line
        line=$(LD_LIBRARY_PATH=$lib taskset -c 1 timeout 120 fi_pingpong "${args[@]}" 127.0.0.1 2>/dev/null | tail -1)
        wait $srv 2>/dev/null
        # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; usec/xfer
        # is half a round trip; MB/sec counts both directions of the
        # ping-pong (not a streaming bandwidth: shown, not compared)
        if [ "$t" = bw ]; then echo "$line" | awk '{print $6}'; else echo "$line" | awk '{print $7}'; fi ;;
    esac
}
impls="oxmpi-deb oxmpi-2.5 mpich5 ompi5 fi_pingpong"
: > results.csv
for r in $(seq "$rounds"); do
    for prov in $provs; do
        for t in latency bw; do
            for i in $impls; do
                v=$(run_impl "$i" "$prov" "$t")
                echo "$r,$prov,$t,$i,${v:-fail}" | tee -a results.csv
            done
        done
    done
done
echo
echo "medians (latency us at 8 B, bw MB/s at 1 MiB; fail: did not run):"
python3 - results.csv <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
keys = sorted({(p, t, i) for _, p, t, i, _ in rows})
for p, t, i in keys:
    vs = [float(v) for _, pp, tt, ii, v in rows if (pp, tt, ii) == (p, t, i) and v != "fail"]
    med = f"{statistics.median(vs):.2f}" if vs else "fail"
    print(f"{p:5} {t:8} {i:12} {med}  ({len(vs)} runs)")
PY
