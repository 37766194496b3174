/* A token ring and an allreduce: the smallest real C MPI program.
 * Any number of ranks >= 1. Prints "ring ok" on rank 0. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int r, n, tok = 0;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n > 1) {
        if (r == 0) {
            tok = 1;
            MPI_Send(&tok, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(&tok, 1, MPI_INT, n - 1, 7, MPI_COMM_WORLD, &st);
        } else {
            MPI_Recv(&tok, 1, MPI_INT, r - 1, 7, MPI_COMM_WORLD, &st);
            tok++;
            MPI_Send(&tok, 1, MPI_INT, (r + 1) % n, 7, MPI_COMM_WORLD);
        }
    } else {
        tok = 1;
    }
    double x = r, mx = -1, sum = -1;
    MPI_Allreduce(&x, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Reduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (r == 0) {
        if (tok != n || mx != n - 1 || sum != n * (n - 1) / 2.0) {
            fprintf(stderr, "ring FAILED: token %d max %g sum %g\n", tok, mx, sum);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        printf("ring ok\n");
    }
    MPI_Finalize();
    return 0;
}
