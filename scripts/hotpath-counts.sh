#!/usr/bin/env bash
# Instructions per call (callgrind, inclusive) of the small-message calls
# through the C ABI, on the probes of docs/perf/probes: PMPI_Isend,
# PMPI_Irecv and PMPI_Waitall (self_exchange mode 0: Irecv, Isend, Waitall
# with oneself), PMPI_Test (self_exchange mode 7: an Irecv tested before
# and after its message), MPI_Recv of a message already there (recv_path:
# 2 ranks over sm). Uses the release install (scripts/build-capi.sh).
# Usage: scripts/hotpath-counts.sh [prefix]   (default target/oxmpi)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
prefix=${1:-target/oxmpi}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$prefix/bin/mpicc" -O2 -o "$out/self_exchange" docs/perf/probes/self_exchange.c
"$prefix/bin/mpicc" -O2 -o "$out/recv_path" docs/perf/probes/recv_path.c
run_cg() { # out-file mode
    valgrind --tool=callgrind --callgrind-out-file="$1" "$out/self_exchange" "$2" 20000 >/dev/null 2>&1
}
run_cg "$out/cg0" 0
run_cg "$out/cg7" 7
scripts/callgrind-calls.py "$out/cg0" PMPI_Isend PMPI_Irecv PMPI_Waitall
scripts/callgrind-calls.py "$out/cg7" PMPI_Test
"$prefix/bin/oxmpirun" -n 2 --mca btl self,sm bash -c "if [ \"\$PMI_RANK\" = 1 ]; then exec valgrind \
    --tool=callgrind --callgrind-out-file=$out/cgr $out/recv_path; else exec $out/recv_path; fi" \
    >/dev/null 2>&1
scripts/callgrind-calls.py "$out/cgr" MPI_Recv
