#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
/* receive_modes.c MODE (docs/perf/log/performance-history.md, "Receives through probes, tests and
 * MPI_Sendrecv"): 8-byte ping-pong where each receive completes through
 * 0 Irecv+Wait, 1 Irecv+Test loop, 2 Iprobe loop+Recv, 3 Sendrecv, 4 Waitany(4 reqs, 1 active) */
static void rx(int mode, char *rb, int peer) {
    MPI_Request q[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int flag = 0, idx;
    switch (mode) {
    case 0: MPI_Irecv(rb, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q[0]); MPI_Wait(&q[0], MPI_STATUS_IGNORE); break;
    case 1: MPI_Irecv(rb, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q[0]);
            while (!flag) MPI_Test(&q[0], &flag, MPI_STATUS_IGNORE); break;
    case 2: while (!flag) MPI_Iprobe(peer, 1, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            MPI_Recv(rb, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); break;
    case 4: MPI_Irecv(rb, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q[2]); MPI_Waitany(4, q, &idx, MPI_STATUS_IGNORE); break;
    }
}
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, mode = atoi(argv[1]); MPI_Comm_rank(MPI_COMM_WORLD, &r);
    char buf[8] = {0}, rb[8];
    int peer = 1 - r, N = 200000;
    const char *names[] = {"irecv+wait", "irecv+test", "iprobe+recv", "sendrecv", "waitany4"};
    for (int pass = 0; pass < 2; pass++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < N; i++) {
            if (mode == 3) {
                MPI_Sendrecv(buf, 8, MPI_BYTE, peer, 1, rb, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                continue;
            }
            if (r == 0) { MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD); rx(mode, rb, peer); }
            else { rx(mode, rb, peer); MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD); }
        }
        double t = MPI_Wtime() - t0;
        if (r == 0 && pass == 1) printf("%s %.3f us\n", names[mode], t * 1e6 / N / (mode == 3 ? 1 : 2));
    }
    MPI_Finalize();
    return 0;
}
