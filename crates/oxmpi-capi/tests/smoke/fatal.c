/* Under the default MPI_ERRORS_ARE_FATAL, an invalid argument ends the job
 * with a message naming the call and the cause (rank 1 sends to a rank that
 * does not exist). Expected: non-zero exit, "MPI_Send" and "rank" on
 * stderr; "unreachable" is never printed. At least 2 ranks. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int r, n, v = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r == 1) {
        MPI_Send(&v, 1, MPI_INT, n + 5, 0, MPI_COMM_WORLD);
        printf("unreachable\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
