/* Each rank prints its place in MPI_COMM_WORLD and an allreduce over it:
 * "rank R of N: sum S", S being the sum of every rank, so N singletons
 * print "rank 0 of 1: sum 0" each. Used by the launcher tests (slurm.rs). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int r, n, sum = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d: sum %d\n", r, n, sum);
    MPI_Finalize();
    return 0;
}
