/* The last rank is killed (SIGKILL) while the others wait in collectives
 * on MPI_COMM_WORLD, under MPI_ERRORS_RETURN and `oxmpirun
 * --enable-recovery`: an MPI_Iallreduce + MPI_Wait, then an
 * MPI_Allgatherv, then an MPI_Ibarrier + MPI_Wait. On every survivor each
 * call must return (never hang) with a code of class MPI_ERR_PROC_FAILED
 * (oxmpi's 75): every survivor's result depends on the dead rank, through
 * the others when not directly. Each survivor prints one line per call,
 * "coll <call> class <class>". At least 2 ranks. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int r, n, v = 0, cls;
    MPI_Request rq;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == n - 1) {
        /* Once every other rank has started its MPI_Iallreduce. */
        for (int i = 0; i < n - 1; i++)
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        raise(SIGKILL);
    }
    int in[4] = {r, r, r, r}, out[4];
    MPI_Iallreduce(in, out, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq);
    MPI_Send(&v, 1, MPI_INT, n - 1, 1, MPI_COMM_WORLD);
    int rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    printf("coll MPI_Iallreduce class %d\n", rc == MPI_SUCCESS ? 0 : cls);
    fflush(stdout);

    int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n);
    int *all = malloc(sizeof(int) * 2 * n);
    for (int i = 0; i < n; i++) {
        counts[i] = 1 + i % 2;
        displs[i] = 2 * i;
    }
    rc = MPI_Allgatherv(in, counts[r], MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    printf("coll MPI_Allgatherv class %d\n", rc == MPI_SUCCESS ? 0 : cls);
    fflush(stdout);

    MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    printf("coll MPI_Ibarrier class %d\n", rc == MPI_SUCCESS ? 0 : cls);
    fflush(stdout);
    free(counts);
    free(displs);
    free(all);
    MPI_Finalize();
    return 0;
}
