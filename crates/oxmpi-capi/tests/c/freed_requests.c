/*
 * freed_requests.c -- requests freed while active, buffered sends, and
 * MPI_Finalize with such operations still in flight.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Everything goes around the ring (send right, receive from left):
 *  - 8 Isends (small and rendezvous-sized) each freed with Request_free right
 *    after posting: the receiver's blocking Recvs get all of them, in order,
 *    with the right data. The send buffers are never touched again.
 *  - A persistent send (Send_init + Start) freed while active: still
 *    delivered.
 *  - Bsend and Ibsend (the Ibsend request freed at once) of 4 messages of
 *    256 KiB each, then Buffer_detach right away while the receiver is still
 *    asleep (it posts its receives 100 ms later): detach must wait until the
 *    buffered data is out -- the sender scribbles over the detached buffer
 *    and the receiver must still get the right data. Detach returns the
 *    attached address and size. Done in two phases (even ranks send, then
 *    odd ranks) so that no rank waits in detach for a rank that is itself
 *    waiting in detach.
 *  - An Irecv of a small message freed with Request_free right after posting
 *    (buffer kept alive); the left neighbour then sends the matching message
 *    and everybody calls MPI_Finalize, which must return (no hang; run under
 *    a timeout).
 *  - Strict mode only (OXMPI_STRICT=1): also a freed Irecv of a
 *    rendezvous-sized message (its sender's blocking MPI_Send must return),
 *    and after MPI_Finalize both freed receives' buffers must hold the data.
 *    The standard says a freed request's communication "will be allowed to
 *    complete", but MPICH 4.0.2 and 5.0.2 never complete a freed receive: the
 *    small message's data is not in the buffer after MPI_Finalize, and the
 *    large message's sender can hang. Open MPI 5 passes both.
 */
#include "check.h"

#define NFREE 8
#define SMALL 16
#define LARGE (64 * 1024) /* ints */
#define NB 4
#define BBYTES (256 * 1024)
#define TAG_FREE 10
#define TAG_PERS 30
#define TAG_BSEND 40
#define TAG_IBSEND 50
#define TAG_FREED_RECV 60

static int rank, size, right, left;

static int val(int src, int k, int i)
{
    return src * 1000000 + k * 10000 + (i % 9973);
}

static int count_of(int k)
{
    return k % 2 ? LARGE : SMALL;
}

/* kept alive until exit */
static int *free_sbuf[NFREE];
static int *pers_sbuf;
static int *recv_keep[2];

static void freed_isends(void)
{
    int k, i, n;
    int *rb = malloc(LARGE * sizeof(int));
    MPI_Request req;
    MPI_Status st;

    for (k = 0; k < NFREE; k++) {
        n = count_of(k);
        free_sbuf[k] = malloc((size_t)n * sizeof(int));
        for (i = 0; i < n; i++)
            free_sbuf[k][i] = val(rank, k, i);
        MPI_CHECK(MPI_Isend(free_sbuf[k], n, MPI_INT, right, TAG_FREE, MPI_COMM_WORLD, &req));
        MPI_CHECK(MPI_Request_free(&req));
        CHECK(req == MPI_REQUEST_NULL, "Request_free did not set MPI_REQUEST_NULL");
    }
    /* same tag: non-overtaking delivers them in order */
    for (k = 0; k < NFREE; k++) {
        int got = -1;
        n = count_of(k);
        MPI_CHECK(MPI_Recv(rb, LARGE, MPI_INT, left, TAG_FREE, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(got == n, "freed Isend %d: count %d, expected %d", k, got, n);
        for (i = 0; i < n; i++)
            CHECK(rb[i] == val(left, k, i), "freed Isend %d: data[%d] = %d", k, i, rb[i]);
    }

    /* active persistent send freed */
    pers_sbuf = malloc(LARGE * sizeof(int));
    for (i = 0; i < LARGE; i++)
        pers_sbuf[i] = val(rank, 77, i);
    MPI_CHECK(MPI_Send_init(pers_sbuf, LARGE, MPI_INT, right, TAG_PERS, MPI_COMM_WORLD, &req));
    MPI_CHECK(MPI_Start(&req));
    MPI_CHECK(MPI_Request_free(&req));
    CHECK(req == MPI_REQUEST_NULL, "Request_free of an active persistent request");
    MPI_CHECK(MPI_Recv(rb, LARGE, MPI_INT, left, TAG_PERS, MPI_COMM_WORLD, &st));
    for (i = 0; i < LARGE; i++)
        CHECK(rb[i] == val(left, 77, i), "freed persistent send: data[%d] = %d", i, rb[i]);
    free(rb);
}

static unsigned char bval(int src, int k, int i)
{
    return (unsigned char)(src * 31 + k * 7 + i * 13 + (i >> 9));
}

/* Phase `parity`: ranks of that parity send to the right and detach at
 * once; ranks whose left neighbour has that parity receive, late. (All ranks
 * detaching before receiving would deadlock: detach waits for delivery.) */
static void buffered(int parity)
{
    int bsize = 2 * NB * (BBYTES + MPI_BSEND_OVERHEAD) + 1024, dsize = -1, k, i;
    MPI_Request req;
    MPI_Status st;

    if (rank % 2 == parity) {
        unsigned char *bbuf = malloc((size_t)bsize), *sb = malloc(BBYTES);
        void *addr = NULL;
        MPI_CHECK(MPI_Buffer_attach(bbuf, bsize));
        for (k = 0; k < NB; k++) {
            for (i = 0; i < BBYTES; i++)
                sb[i] = bval(rank, k, i);
            MPI_CHECK(MPI_Bsend(sb, BBYTES, MPI_BYTE, right, TAG_BSEND + k, MPI_COMM_WORLD));
            for (i = 0; i < BBYTES; i++)
                sb[i] = bval(rank, k + NB, i);
            MPI_CHECK(MPI_Ibsend(sb, BBYTES, MPI_BYTE, right, TAG_IBSEND + k, MPI_COMM_WORLD,
                                 &req));
            MPI_CHECK(MPI_Request_free(&req));
        }
        /* the receiver has not posted anything yet (it sleeps below) */
        MPI_CHECK(MPI_Buffer_detach(&addr, &dsize));
        CHECK(addr == (void *)bbuf && dsize == bsize, "Buffer_detach gave %p/%d, attached %p/%d",
              addr, dsize, (void *)bbuf, bsize);
        memset(bbuf, 0xdd, (size_t)bsize);
        free(bbuf);
        memset(sb, 0xcc, BBYTES);
        free(sb);
    }
    if (left % 2 == parity) {
        unsigned char *rb = malloc(BBYTES);
        sleep_ms(100);
        for (k = 0; k < 2 * NB; k++) {
            int tag = k < NB ? TAG_BSEND + k : TAG_IBSEND + (k - NB), got = -1;
            MPI_CHECK(MPI_Recv(rb, BBYTES, MPI_BYTE, left, tag, MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &got));
            CHECK(got == BBYTES, "buffered message %d: count %d", k, got);
            for (i = 0; i < BBYTES; i++)
                CHECK(rb[i] == bval(left, k, i),
                      "buffered message %d: byte %d is %#x, expected %#x (detach did not wait?)",
                      k, i, rb[i], bval(left, k, i));
        }
        free(rb);
    }
}

/* Freed receives: the small one always, the rendezvous-sized one only in
 * strict mode (MPICH never progresses a freed receive, so the matching
 * blocking Send of a large message can hang there). */
static int n_freed_recvs(void)
{
    return strict_mode() ? 2 : 1;
}

static void freed_irecvs(void)
{
    int k, i, nk = n_freed_recvs();
    MPI_Request req;
    for (k = 0; k < nk; k++) {
        int n = k ? LARGE : SMALL;
        recv_keep[k] = malloc((size_t)n * sizeof(int));
        for (i = 0; i < n; i++)
            recv_keep[k][i] = -1;
        MPI_CHECK(MPI_Irecv(recv_keep[k], n, MPI_INT, left, TAG_FREED_RECV + k, MPI_COMM_WORLD,
                            &req));
        MPI_CHECK(MPI_Request_free(&req));
        CHECK(req == MPI_REQUEST_NULL, "Request_free of an Irecv");
    }
    for (k = 0; k < nk; k++) {
        int n = k ? LARGE : SMALL;
        int *sb = malloc((size_t)n * sizeof(int));
        for (i = 0; i < n; i++)
            sb[i] = val(rank, 50 + k, i);
        MPI_CHECK(MPI_Send(sb, n, MPI_INT, right, TAG_FREED_RECV + k, MPI_COMM_WORLD));
        free(sb);
    }
}

int main(int argc, char **argv)
{
    int k, i, strict;

    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;
    strict = strict_mode();

    freed_isends();
    buffered(0);
    buffered(1);
    freed_irecvs();

    /* the freed receives may still be in flight here */
    MPI_CHECK(MPI_Finalize());

    if (strict) {
        for (k = 0; k < 2; k++) {
            int n = k ? LARGE : SMALL;
            for (i = 0; i < n; i++)
                CHECK(recv_keep[k][i] == val(left, 50 + k, i),
                      "freed Irecv %d not complete after MPI_Finalize: data[%d] = %d", k, i,
                      recv_keep[k][i]);
        }
    }
    test_ok_rank(rank, "freed_requests");
    return 0;
}
