/* recv_path.c: instructions per MPI_Recv of a message already there (docs/perf/log/performance-history.md,
 * "The small-message receive"). Rank 0 sends 60 eager 8-byte messages; rank 1, after a
 * 20 ms sleep with no MPI call, receives them all; 20 windows (1200 receives).
 *
 *   target/oxmpi/bin/mpicc -O2 recv_path.c -o recv_path
 *   target/release/oxmpirun -n 2 bash -c 'if [ "$PMI_RANK" = 1 ]; then exec valgrind \
 *       --tool=callgrind --cache-sim=yes --toggle-collect=recv_window \
 *       --callgrind-out-file=cg.out ./recv_path; else exec ./recv_path; fi'
 *   callgrind_annotate --show=Ir,Dw cg.out   # PROGRAM TOTALS / 1200 per receive
 */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
#define N 60
__attribute__((noinline)) void recv_window(char *b, int n) {
    for (int i = 0; i < n; i++) MPI_Recv(b, 8, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    char b[8] = {0};
    for (int it = 0; it < 20; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (r == 0) { for (int i = 0; i < N; i++) MPI_Send(b, 8, MPI_BYTE, 1, 5, MPI_COMM_WORLD); }
        else { usleep(20000); recv_window(b, N); }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
