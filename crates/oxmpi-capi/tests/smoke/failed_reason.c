/* The last rank is killed (SIGKILL) while the others wait for its message
 * in MPI_Irecv + MPI_Wait and in MPI_Irecv + MPI_Waitall, under
 * MPI_ERRORS_RETURN and `oxmpirun --enable-recovery`: each survivor's
 * call fails, and MPI_Error_string of the code it returned (and of the
 * code in the Waitall status's MPI_ERROR) names the call and the reason
 * the PML recorded (the peer is gone). Each survivor prints one line
 * "reason <call>: <string>". At least 2 ranks. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int r, n, v = 0, len;
    char s[MPI_MAX_ERROR_STRING];
    MPI_Request rq[2];
    MPI_Status st[2];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == n - 1) {
        for (int i = 0; i < n - 1; i++)
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        raise(SIGKILL);
    }
    MPI_Irecv(&v, 1, MPI_INT, n - 1, 2, MPI_COMM_WORLD, &rq[0]);
    MPI_Send(&v, 1, MPI_INT, n - 1, 1, MPI_COMM_WORLD);
    int rc = MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
    MPI_Error_string(rc, s, &len);
    printf("reason MPI_Wait (rc %d): %s\n", rc, rc == MPI_SUCCESS ? "no error" : s);
    MPI_Irecv(&v, 1, MPI_INT, n - 1, 3, MPI_COMM_WORLD, &rq[0]);
    MPI_Irecv(&v, 1, MPI_INT, n - 1, 4, MPI_COMM_WORLD, &rq[1]);
    rc = MPI_Waitall(2, rq, st);
    MPI_Error_string(st[0].MPI_ERROR, s, &len);
    printf("reason MPI_Waitall status (rc %d): %s\n", rc, rc == MPI_SUCCESS ? "no error" : s);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
