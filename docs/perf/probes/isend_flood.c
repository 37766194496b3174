/* Outstanding-Isend flood: rank 0 posts N MPI_Isends of S bytes (each from
 * its own buffer) to rank 1 before rank 1 posts any receive; rank 1 then
 * posts N MPI_Irecvs; both MPI_Waitall. Prints the time from the first
 * Isend to rank 0's Waitall returning.
 *   mpicc -O2 -o isend_flood isend_flood.c
 *   mpirun -n 2 ./isend_flood N S
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long n = argc > 1 ? atol(argv[1]) : 10000;
    long s = argc > 2 ? atol(argv[2]) : 1024;
    char *buf = malloc((size_t)n * (size_t)(s ? s : 1));
    MPI_Request *req = malloc((size_t)n * sizeof *req);
    memset(buf, rank, (size_t)n * (size_t)(s ? s : 1));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (rank == 0) {
        for (long i = 0; i < n; i++)
            MPI_Isend(buf + i * s, (int)s, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &req[i]);
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Barrier(MPI_COMM_WORLD);
        for (long i = 0; i < n; i++)
            MPI_Irecv(buf + i * s, (int)s, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &req[i]);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank < 2)
        MPI_Waitall((int)n, req, MPI_STATUSES_IGNORE);
    double t = MPI_Wtime() - t0;
    if (rank == 1)
        for (long i = 0; i < n * s; i++)
            if (buf[i] != 0) {
                fprintf(stderr, "isend_flood: byte %ld is %d\n", i, buf[i]);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("isend_flood n=%ld size=%ld: %.3f s\n", n, s, t);
    free(buf);
    free(req);
    MPI_Finalize();
    return 0;
}
