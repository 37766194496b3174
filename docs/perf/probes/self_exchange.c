#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* self_exchange.c MODE ITERS (docs/perf/log/performance-history.md, "Posted receives and the request
 * calls"): the software cost of an exchange with oneself on MPI_COMM_SELF, no
 * cross-core traffic (run it under callgrind for instruction counts).
 * 0: Irecv, Isend, Waitall 2. 1: Isend, Irecv, Waitall 2. 2: Irecv x2 (tags 1, 2),
 * Isend x2, Waitall 4. 3: Irecv, Isend, Wait x2. 4: Irecv, Send, Wait.
 * 5: Irecv among 3 null handles, Send, Waitany 4. 6: Send, Iprobe loop, Recv.
 * 7: Irecv, Test, Send, Test loop. */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int mode = atoi(argv[1]), iters = atoi(argv[2]);
    char s[16] = {0}, rb[16];
    MPI_Request q[4];
    for (int pass = 0; pass < 2; pass++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            if (mode == 0) {
                MPI_Irecv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[0]);
                MPI_Isend(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[1]);
                MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            } else if (mode == 1) {
                MPI_Isend(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[1]);
                MPI_Irecv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[0]);
                MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            } else if (mode == 3) {
                MPI_Irecv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[0]);
                MPI_Isend(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[1]);
                MPI_Wait(&q[0], MPI_STATUS_IGNORE);
                MPI_Wait(&q[1], MPI_STATUS_IGNORE);
            } else if (mode == 5) {
                int idx;
                q[0] = q[1] = q[3] = MPI_REQUEST_NULL;
                MPI_Irecv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[2]);
                MPI_Send(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF);
                MPI_Waitany(4, q, &idx, MPI_STATUS_IGNORE);
            } else if (mode == 6) {
                int flag = 0;
                MPI_Send(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF);
                while (!flag) MPI_Iprobe(0, 1, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
                MPI_Recv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, MPI_STATUS_IGNORE);
            } else if (mode == 7) {
                int flag = 0;
                MPI_Irecv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[0]);
                MPI_Test(&q[0], &flag, MPI_STATUS_IGNORE);
                MPI_Send(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF);
                while (!flag) MPI_Test(&q[0], &flag, MPI_STATUS_IGNORE);
            } else if (mode == 4) {
                MPI_Irecv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[0]);
                MPI_Send(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF);
                MPI_Wait(&q[0], MPI_STATUS_IGNORE);
            } else {
                MPI_Irecv(rb, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[0]);
                MPI_Irecv(rb + 8, 8, MPI_BYTE, 0, 2, MPI_COMM_SELF, &q[1]);
                MPI_Isend(s, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &q[2]);
                MPI_Isend(s + 8, 8, MPI_BYTE, 0, 2, MPI_COMM_SELF, &q[3]);
                MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
            }
        }
        double t = MPI_Wtime() - t0;
        if (pass == 1) printf("self mode %d %.4f us\n", mode, t * 1e6 / iters);
    }
    MPI_Finalize();
    return 0;
}
