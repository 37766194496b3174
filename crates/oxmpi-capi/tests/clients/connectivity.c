/*
 * connectivity.c -- every pair of ranks exchanges messages both ways,
 * checked (in the manner of Open MPI's examples/connectivity_c.c).
 *
 * For every pair (i, j), i < j, in a fixed order known to all ranks: rank i
 * sends j a small message (its rank, j's rank, the pair's sequence number)
 * and a large one (256 KiB + 3 bytes, a pattern of the pair: past every
 * eager limit), rank j checks both and answers with the same two messages
 * from its side, which rank i checks. Then every rank checks that it talked
 * to every other rank exactly once each way, and an MPI_Allreduce confirms
 * that all ranks did. A plain MPI C program: it runs under any MPI.
 *
 *   connectivity [-v]     -v: the lower rank of each pair prints it once checked
 *
 * Success: rank 0 prints "ok: connectivity (N ranks, P pairs)" and every
 * rank exits 0; a failed check prints "FAIL connectivity: ..." to stderr and
 * aborts.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE (256 * 1024 + 3)

static int rank, size;

static void fail(const char *what, int peer)
{
    fprintf(stderr, "FAIL connectivity: %s (rank %d, peer %d)\n", what, rank, peer);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static unsigned char pattern(int from, int to, int seq, long k)
{
    return (unsigned char)(from * 131 + to * 17 + seq * 7 + k * 3 + (k >> 8));
}

static void fill(unsigned char *buf, int from, int to, int seq)
{
    for (long k = 0; k < LARGE; k++)
        buf[k] = pattern(from, to, seq, k);
}

static void check_large(const unsigned char *buf, int from, int to, int seq)
{
    for (long k = 0; k < LARGE; k++)
        if (buf[k] != pattern(from, to, seq, k))
            fail("large message corrupted", from);
}

/* Sends this rank's side of pair (me, peer) #seq. */
static void send_side(int peer, int seq, unsigned char *large)
{
    int msg[3] = {rank, peer, seq};
    if (MPI_Send(msg, 3, MPI_INT, peer, seq, MPI_COMM_WORLD) != MPI_SUCCESS)
        fail("MPI_Send of the small message", peer);
    fill(large, rank, peer, seq);
    if (MPI_Send(large, LARGE, MPI_BYTE, peer, seq, MPI_COMM_WORLD) != MPI_SUCCESS)
        fail("MPI_Send of the large message", peer);
}

/* Receives and checks the peer's side of pair (peer, me) #seq. */
static void recv_side(int peer, int seq, unsigned char *large)
{
    int msg[3] = {-1, -1, -1}, n = -1;
    MPI_Status st;
    if (MPI_Recv(msg, 3, MPI_INT, peer, seq, MPI_COMM_WORLD, &st) != MPI_SUCCESS)
        fail("MPI_Recv of the small message", peer);
    if (msg[0] != peer || msg[1] != rank || msg[2] != seq)
        fail("small message has the wrong contents", peer);
    if (st.MPI_SOURCE != peer || st.MPI_TAG != seq)
        fail("small message status has the wrong source or tag", peer);
    MPI_Get_count(&st, MPI_INT, &n);
    if (n != 3)
        fail("small message has the wrong count", peer);
    memset(large, 0, LARGE);
    if (MPI_Recv(large, LARGE, MPI_BYTE, peer, seq, MPI_COMM_WORLD, &st) != MPI_SUCCESS)
        fail("MPI_Recv of the large message", peer);
    MPI_Get_count(&st, MPI_BYTE, &n);
    if (n != LARGE)
        fail("large message has the wrong count", peer);
    check_large(large, peer, rank, seq);
}

int main(int argc, char **argv)
{
    int verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    unsigned char *large = malloc(LARGE);
    int *sent = calloc(size, sizeof(int)), *heard = calloc(size, sizeof(int));
    if (large == NULL || sent == NULL || heard == NULL)
        fail("out of memory", rank);

    int seq = 0, pairs = 0;
    for (int i = 0; i < size; i++) {
        for (int j = i + 1; j < size; j++, seq++) {
            pairs++;
            if (rank == i) {
                send_side(j, seq, large);
                recv_side(j, seq, large);
                sent[j]++;
                heard[j]++;
                if (verbose)
                    printf("connectivity: %d <-> %d checked\n", i, j);
            } else if (rank == j) {
                recv_side(i, seq, large);
                send_side(i, seq, large);
                sent[i]++;
                heard[i]++;
            }
        }
    }
    for (int p = 0; p < size; p++) {
        int want = p == rank ? 0 : 1;
        if (sent[p] != want || heard[p] != want)
            fail("a pair was not exchanged exactly once", p);
    }
    int mine = 1, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS ||
        all != size)
        fail("not every rank finished", -1);
    if (rank == 0) {
        printf("ok: connectivity (%d ranks, %d pairs)\n", size, pairs);
        fflush(stdout);
    }
    free(large);
    free(sent);
    free(heard);
    MPI_Finalize();
    return 0;
}
