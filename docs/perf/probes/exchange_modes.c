#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* exchange_modes.c MODE SIZE ITERS (docs/perf/log/performance-history.md, "Posted receives and the
 * request calls"): microseconds per exchange step with both ring neighbours.
 * mode 0: Irecv x2, Isend x2, Waitall 4 (a halo). 1: Isend x2 then Irecv x2, Waitall 4.
 * 2: Irecv, Isend, Waitall 2 (one message each way). 3: Irecv x2, Isend x2, Wait x4 in order.
 * 4: Irecv x2, Send x2, Waitall 2. 5: as 2 with SPIN (environment) empty loop turns
 * between Irecv and Isend (is the posting on the critical path?). */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
    int spin = getenv("SPIN") ? atoi(getenv("SPIN")) : 0;
    int mode = atoi(argv[1]), size = atoi(argv[2]), iters = atoi(argv[3]);
    char *s = calloc(size + 1, 2), *rb = calloc(size + 1, 2);
    int left = (r + n - 1) % n, right = (r + 1) % n;
    MPI_Request q[4];
    for (int pass = 0; pass < 2; pass++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            if (mode == 0 || mode == 3) {
            MPI_Irecv(rb, size, MPI_BYTE, left, 1, MPI_COMM_WORLD, &q[0]);
            MPI_Irecv(rb + size, size, MPI_BYTE, right, 2, MPI_COMM_WORLD, &q[1]);
            MPI_Isend(s, size, MPI_BYTE, right, 1, MPI_COMM_WORLD, &q[2]);
            MPI_Isend(s + size, size, MPI_BYTE, left, 2, MPI_COMM_WORLD, &q[3]);
            if (mode == 0) MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
            else for (int k = 0; k < 4; k++) MPI_Wait(&q[k], MPI_STATUS_IGNORE);
            } else if (mode == 1) {
            MPI_Isend(s, size, MPI_BYTE, right, 1, MPI_COMM_WORLD, &q[2]);
            MPI_Isend(s + size, size, MPI_BYTE, left, 2, MPI_COMM_WORLD, &q[3]);
            MPI_Irecv(rb, size, MPI_BYTE, left, 1, MPI_COMM_WORLD, &q[0]);
            MPI_Irecv(rb + size, size, MPI_BYTE, right, 2, MPI_COMM_WORLD, &q[1]);
            MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
            } else if (mode == 2) {
            MPI_Irecv(rb, size, MPI_BYTE, left, 1, MPI_COMM_WORLD, &q[0]);
            MPI_Isend(s, size, MPI_BYTE, right, 1, MPI_COMM_WORLD, &q[1]);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            } else if (mode == 5) {
            MPI_Irecv(rb, size, MPI_BYTE, left, 1, MPI_COMM_WORLD, &q[0]);
            for (volatile int k = 0; k < spin; k++) ;
            MPI_Isend(s, size, MPI_BYTE, right, 1, MPI_COMM_WORLD, &q[1]);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            } else if (mode == 4) {
            MPI_Irecv(rb, size, MPI_BYTE, left, 1, MPI_COMM_WORLD, &q[0]);
            MPI_Irecv(rb + size, size, MPI_BYTE, right, 2, MPI_COMM_WORLD, &q[1]);
            MPI_Send(s, size, MPI_BYTE, right, 1, MPI_COMM_WORLD);
            MPI_Send(s + size, size, MPI_BYTE, left, 2, MPI_COMM_WORLD);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            }
        }
        double t = MPI_Wtime() - t0, mx;
        MPI_Reduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r == 0 && pass == 1) printf("mode %d spin %d n=%d size=%d %.3f us\n", mode, spin, n, size, mx * 1e6 / iters);
    }
    MPI_Finalize();
    return 0;
}
