/* The last rank is killed (SIGKILL) while the others wait in MPI_Recv from
 * it, under the default MPI_ERRORS_ARE_FATAL: the survivors' receives fail
 * and abort the job, but the launcher must name the killed rank as the
 * cause and exit with its status (128 + 9), not a survivor's abort.
 * At least 2 ranks. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int r, n, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == n - 1) {
        /* Once every other rank is past the barrier. */
        for (int i = 0; i < n - 1; i++)
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        raise(SIGKILL);
    }
    MPI_Send(&v, 1, MPI_INT, n - 1, 1, MPI_COMM_WORLD);
    MPI_Recv(&v, 1, MPI_INT, n - 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("unreachable\n");
    MPI_Finalize();
    return 0;
}
