/* entry_paths.c: instructions per call of the C ABI's small-message entry points, for
 * comparing two builds of the library (callgrind; docs/performance.md). Rank 0 runs
 * isend_window (60 MPI_Isend of 8 bytes, then MPI_Waitall) and send_window (60
 * MPI_Send); rank 1, after a 20 ms sleep with no MPI call (every message has
 * arrived), irecv_waitall_window (60 MPI_Irecv, MPI_Waitall), recv_window (60
 * MPI_Recv), irecv_wait_window and irecv_test_window (MPI_Irecv then MPI_Wait or
 * MPI_Test, 60 times). 20 rounds: divide each window's inclusive count by 1200.
 *
 *   target/oxmpi/bin/mpicc -O2 -g entry_paths.c -o entry_paths
 *   target/oxmpi/bin/oxmpirun -n 2 --mca btl self,sm env LD_LIBRARY_PATH=$LIB sh -c \
 *     'exec valgrind --tool=callgrind --toggle-collect=isend_window --toggle-collect=send_window \
 *      --toggle-collect=irecv_waitall_window --toggle-collect=recv_window \
 *      --toggle-collect=irecv_wait_window --toggle-collect=irecv_test_window \
 *      --callgrind-out-file=cg.$PMI_RANK ./entry_paths'
 *   callgrind_annotate --inclusive=yes cg.0 | grep _window   # and cg.1
 *
 * (LD_LIBRARY_PATH chooses the library to measure: it takes precedence over the
 * RUNPATH mpicc sets.) The receive windows vary by a few percent from run to run when
 * a message is late; the others are the same to a few instructions. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
#define N 60
#define IT 20
static char b[8 * N];
static MPI_Request r[N];
__attribute__((noinline)) void isend_window(void) {
    for (int i = 0; i < N; i++) MPI_Isend(b + 8 * i, 8, MPI_BYTE, 1, 5, MPI_COMM_WORLD, &r[i]);
    MPI_Waitall(N, r, MPI_STATUSES_IGNORE);
}
__attribute__((noinline)) void send_window(void) {
    for (int i = 0; i < N; i++) MPI_Send(b + 8 * i, 8, MPI_BYTE, 1, 6, MPI_COMM_WORLD);
}
__attribute__((noinline)) void irecv_waitall_window(void) {
    for (int i = 0; i < N; i++) MPI_Irecv(b + 8 * i, 8, MPI_BYTE, 0, 5, MPI_COMM_WORLD, &r[i]);
    MPI_Waitall(N, r, MPI_STATUSES_IGNORE);
}
__attribute__((noinline)) void recv_window(void) {
    for (int i = 0; i < N; i++) MPI_Recv(b + 8 * i, 8, MPI_BYTE, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}
__attribute__((noinline)) void irecv_wait_window(void) {
    for (int i = 0; i < N; i++) {
        MPI_Irecv(b + 8 * i, 8, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    }
}
__attribute__((noinline)) void irecv_test_window(void) {
    int f;
    for (int i = 0; i < N; i++) {
        MPI_Irecv(b + 8 * i, 8, MPI_BYTE, 0, 8, MPI_COMM_WORLD, &r[0]);
        do MPI_Test(&r[0], &f, MPI_STATUS_IGNORE); while (!f);
    }
}
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int it = 0; it < IT; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            isend_window();
            send_window();
            for (int i = 0; i < N; i++) MPI_Send(b, 8, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
            for (int i = 0; i < N; i++) MPI_Send(b, 8, MPI_BYTE, 1, 8, MPI_COMM_WORLD);
        } else {
            usleep(20000);
            irecv_waitall_window();
            recv_window();
            irecv_wait_window();
            irecv_test_window();
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
