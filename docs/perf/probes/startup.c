/* Start-up and shut-down cost of a job: MPI_Init, one MPI_Barrier, and
 * MPI_Finalize, nothing else. Time the whole launcher command:
 *   mpicc -O2 -o startup startup.c
 *   time mpirun -n 64 ./startup
 */
#include <mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
