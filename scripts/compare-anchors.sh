#!/usr/bin/env bash
# Runs oxmpi's OSU-style benchmark (examples/osu.rs), the anchor C programs
# built with oxmpi's mpicc (IMPLS=oxmpi-c: scripts/build-capi.sh release, then
# make -C ../shared/anchors/bench IMPLS=oxmpi MPICC_oxmpi=$PWD/target/oxmpi/bin/mpicc
# BUILD=$ANCHOR_DIR/build oxmpi) and the anchor C programs
# (../shared/anchors/bench, built for Open MPI 5 and MPICH 5 from PyPI under
# $ANCHOR_DIR, see ../shared/anchors/README.md) interleaved, A B C A B C, with
# 2 ranks pinned to cores 0 and 1, and prints every CSV line
# (impl,transport,test,size,value,unit) to stdout. Medians: pipe into
# scripts/median.py.
#
#   REPS=3 TESTS="latency msgrate" scripts/compare-anchors.sh > runs.csv
#   TRANSPORT=tcp TESTS="latency bw" scripts/compare-anchors.sh   # TCP loopback
#
# TRANSPORT=shm (default): each implementation's default shared-memory path.
# TRANSPORT=tcp: oxmpi with btl self,tcp; Open MPI with pml ob1, btl tcp,self on
# lo; MPICH with libfabric's tcp provider on lo and no shared memory (as the
# anchors were measured).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ANCHOR_DIR="${ANCHOR_DIR:-/tmp/anchors}"
REPS="${REPS:-3}"
TESTS="${TESTS:-latency latency_anysrc bw msgrate}"
IMPLS="${IMPLS:-oxmpi ompi5 mpich5}"
TRANSPORT="${TRANSPORT:-shm}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 BENCH_TRANSPORT="$TRANSPORT"
OX_ARGS=() OMPI_ARGS=() MPICH_ENV=()
if [ "$TRANSPORT" = tcp ]; then
    OX_ARGS=(--mca btl self,tcp --mca btl_tcp_if_include lo)
    OMPI_ARGS=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
    MPICH_ENV=(MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=lo)
fi
for rep in $(seq 1 "$REPS"); do
    for t in $TESTS; do
        for impl in $IMPLS; do
            case $impl in
            oxmpi) BENCH_IMPL=oxmpi ./target/release/oxmpirun -n 2 --bind-to core \
                       "${OX_ARGS[@]}" ./target/release/examples/osu "$t" ;;
            oxmpi-c) BENCH_IMPL=oxmpi-c ./target/release/oxmpirun -n 2 --bind-to core \
                       "${OX_ARGS[@]}" "$ANCHOR_DIR/build/oxmpi/$t" ;;
            ompi5) BENCH_IMPL=ompi5 "$ANCHOR_DIR/venv-ompi5/bin/mpirun" -np 2 --bind-to core \
                       --map-by core "${OMPI_ARGS[@]}" "$ANCHOR_DIR/build/ompi5/$t" ;;
            mpich5) env BENCH_IMPL=mpich5 "${MPICH_ENV[@]}" "$ANCHOR_DIR/venv-mpich5/bin/mpiexec" \
                       -n 2 -bind-to core "$ANCHOR_DIR/build/mpich5/$t" ;;
            esac
        done
    done
done
