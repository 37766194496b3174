/* waitany_pingpong.c: 8-byte ping-pong whose receives complete through MPI_Waitany
 * (docs/perf/log/performance-history.md, "Waiting ranks yield only when idle"). Prints half the round trip.
 *   mpicc -O2 waitany_pingpong.c -o wa && mpirun -n 2 ./wa */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    char buf[8] = {0}, rb[8];
    int peer = 1 - r, N = 200000, idx;
    MPI_Request q[2];
    for (int pass = 0; pass < 2; pass++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < N; i++) {
            if (r == 0) {
                MPI_Irecv(rb, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q[0]);
                MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Waitany(1, q, &idx, MPI_STATUS_IGNORE);
            } else {
                MPI_Irecv(rb, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q[0]);
                MPI_Waitany(1, q, &idx, MPI_STATUS_IGNORE);
                MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (r == 0 && pass == 1) printf("waitany pingpong half-rtt %.3f us\n", t * 1e6 / N / 2);
    }
    MPI_Finalize();
    return 0;
}
