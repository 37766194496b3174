/* Time from a rank's death to the end of its job: the last rank prints the
 * wall-clock time (CLOCK_REALTIME, seconds) and kills itself with SIGKILL
 * while the others wait for it in MPI_Recv; compare with the time the
 * launcher returns:
 *   t0=$(mpirun -n 4 ./kill_to_end | tail -1); t1=$(date +%s.%N)
 *   echo "$t1 - $t0" | bc
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

int main(int argc, char **argv)
{
    int r, n, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r == n - 1) {
        for (int i = 0; i < n - 1; i++)
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        printf("%ld.%09ld\n", (long)ts.tv_sec, ts.tv_nsec);
        fflush(stdout);
        raise(SIGKILL);
    }
    MPI_Send(&v, 1, MPI_INT, n - 1, 1, MPI_COMM_WORLD);
    MPI_Recv(&v, 1, MPI_INT, n - 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
