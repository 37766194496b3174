/*
 * p2p_blocking.c -- blocking point-to-point in all four send modes.
 *
 * Ranks: any number from 2 to 8 (minimum 2).
 *
 * Checks:
 *  - Send, Bsend, Ssend and Rsend to a blocking Recv between every pair of
 *    ranks, in both directions, for message sizes 0, 1, 255, 256, 4096,
 *    65536 and (1 << 20) + 3 bytes; data, status source/tag and Get_count
 *    (the receive buffer is larger than the message) are checked. Pairs are
 *    scheduled as a round-robin tournament so disjoint pairs run at once; per
 *    pair and mode one side sends all sizes (each size its own tag) while the
 *    other receives them in order, then the other way round.
 *    Bsend uses Buffer_attach with room for two such batches including
 *    MPI_BSEND_OVERHEAD per message; Buffer_detach at the end returns the
 *    same buffer and size. Rsend: the receiver posts all its Irecvs, the pair
 *    then does a zero-byte Sendrecv handshake, then the sender calls Rsend.
 *  - MPI_ANY_SOURCE / MPI_ANY_TAG receives at rank 0 of one message from
 *    every other rank: status source/tag identify each sender exactly once.
 *  - MPI_PROC_NULL: Send returns at once; Recv gives source MPI_PROC_NULL,
 *    tag MPI_ANY_TAG, count 0 and leaves the buffer alone.
 *  - Small messages (MPI_Recv's small-message path): between ranks 2k and
 *    2k+1, every size from 0 to 60 bytes, received into a buffer with guard
 *    bytes past the message, first with the exact tag while messages of a
 *    second tag come interleaved (received after: they go unexpected), then
 *    again with MPI_ANY_TAG, with MPI_ANY_SOURCE, and with both; data,
 *    guard, status source/tag/count, and MPI_ERROR left as it was
 *    (MPI_STATUS_IGNORE every third); then 2000 rounds of an 8-byte
 *    ping-pong, each message numbered, every other receive from
 *    MPI_ANY_SOURCE.
 *  - MPI_Sendrecv around the ring, 0 to 70000 bytes (crossing the small
 *    path and the eager limits), with an exact source and tag, then
 *    MPI_ANY_SOURCE, then MPI_ANY_TAG: data, guard bytes, status, count.
 *  - A zero-count receive (NULL buffer, MPI_BYTE) matches a zero-byte send;
 *    strict mode only (OXMPI_STRICT=1): also with MPI_DATATYPE_NULL as the
 *    receive datatype (MPICH accepts it, Open MPI 5 returns MPI_ERR_TYPE; the
 *    standard does not say that MPI_DATATYPE_NULL is valid with count 0).
 */
#include "check.h"

#define NSIZES 7
static const int sizes[NSIZES] = {0, 1, 255, 256, 4096, 65536, (1 << 20) + 3};
#define MAXSIZE ((1 << 20) + 3)
#define SLACK 16

enum { M_SEND, M_BSEND, M_SSEND, M_RSEND, NMODES };
static const char *mode_name[NMODES] = {"Send", "Bsend", "Ssend", "Rsend"};

#define TAG_DATA 100
#define TAG_HANDSHAKE 200
#define TAG_ANY_BASE 300
#define TAG_ZERO 400
#define TAG_SMALL 500
#define TAG_SMALL_LATE 501
#define TAG_PING 502
#define TAG_SENDRECV 600
#define SMALL_MAX 60


static unsigned char pattern(int src, int dst, int size, int mode, int i)
{
    return (unsigned char)(src * 31 + dst * 17 + size * 3 + mode * 101 + i * 7 + (i >> 8));
}

/* partner of rank x in round r of a round-robin tournament among m (even)
 * players; players >= n are byes */
static int partner(int x, int r, int m)
{
    if (x == m - 1)
        return r;
    if (x == r)
        return m - 1;
    return ((2 * r - x) % (m - 1) + (m - 1)) % (m - 1);
}

static unsigned char *sbuf, *rbuf;
static size_t roff[NSIZES + 1]; /* receive region of each size in rbuf */

/* one blocking send of every size, in order */
static void send_batch(int mode, int me, int peer)
{
    int s, i;
    if (mode == M_RSEND) /* wait until the receiver says its receives are posted */
        MPI_CHECK(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, TAG_HANDSHAKE, NULL, 0, MPI_BYTE, peer,
                               TAG_HANDSHAKE, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (s = 0; s < NSIZES; s++) {
        int size = sizes[s], tag = TAG_DATA + mode * NSIZES + s;
        for (i = 0; i < size; i++)
            sbuf[i] = pattern(me, peer, size, mode, i);
        switch (mode) {
        case M_SEND:
            MPI_CHECK(MPI_Send(sbuf, size, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            break;
        case M_BSEND:
            MPI_CHECK(MPI_Bsend(sbuf, size, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            break;
        case M_SSEND:
            MPI_CHECK(MPI_Ssend(sbuf, size, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            break;
        case M_RSEND:
            MPI_CHECK(MPI_Rsend(sbuf, size, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            break;
        }
        /* the send buffer may be reused as soon as a blocking send returns */
        memset(sbuf, 0xa5, (size_t)size);
    }
}

/* the matching receives, each into its own region of rbuf */
static void recv_batch(int mode, int me, int peer)
{
    MPI_Status st[NSIZES];
    MPI_Request req[NSIZES];
    int s, i, n;
    memset(rbuf, 0xee, roff[NSIZES]);
    for (s = 0; s < NSIZES; s++)
        st[s].MPI_SOURCE = st[s].MPI_TAG = -999;
    if (mode == M_RSEND) {
        for (s = 0; s < NSIZES; s++)
            MPI_CHECK(MPI_Irecv(rbuf + roff[s], sizes[s] + SLACK, MPI_BYTE, peer,
                                TAG_DATA + mode * NSIZES + s, MPI_COMM_WORLD, &req[s]));
        MPI_CHECK(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, TAG_HANDSHAKE, NULL, 0, MPI_BYTE, peer,
                               TAG_HANDSHAKE, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Waitall(NSIZES, req, st));
    } else {
        for (s = 0; s < NSIZES; s++)
            MPI_CHECK(MPI_Recv(rbuf + roff[s], sizes[s] + SLACK, MPI_BYTE, peer,
                               TAG_DATA + mode * NSIZES + s, MPI_COMM_WORLD, &st[s]));
    }
    for (s = 0; s < NSIZES; s++) {
        int size = sizes[s];
        const unsigned char *b = rbuf + roff[s];
        CHECK(st[s].MPI_SOURCE == peer && st[s].MPI_TAG == TAG_DATA + mode * NSIZES + s,
              "%s size %d: status source %d tag %d", mode_name[mode], size, st[s].MPI_SOURCE,
              st[s].MPI_TAG);
        n = -1;
        MPI_CHECK(MPI_Get_count(&st[s], MPI_BYTE, &n));
        CHECK(n == size, "%s from %d: Get_count %d, sent %d", mode_name[mode], peer, n, size);
        for (i = 0; i < size; i++)
            CHECK(b[i] == pattern(peer, me, size, mode, i),
                  "%s size %d from %d: byte %d is %#x, expected %#x", mode_name[mode], size,
                  peer, i, b[i], pattern(peer, me, size, mode, i));
        for (i = size; i < size + SLACK; i++)
            CHECK(b[i] == 0xee, "%s size %d: byte %d past the message was written",
                  mode_name[mode], size, i);
    }
}

int main(int argc, char **argv)
{
    int rank, size, m, r, s, mode, i;
    int bsize;
    void *bbuf;

    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2, "needs at least 2 ranks, got %d", size);

    for (s = 0; s < NSIZES; s++)
        roff[s + 1] = roff[s] + (size_t)sizes[s] + SLACK;
    sbuf = malloc(MAXSIZE);
    rbuf = malloc(roff[NSIZES]);
    /* room for two full batches of Bsends */
    bsize = 2 * ((int)roff[NSIZES] + NSIZES * MPI_BSEND_OVERHEAD);
    bbuf = malloc((size_t)bsize);
    CHECK(sbuf && rbuf && bbuf, "malloc");
    MPI_CHECK(MPI_Buffer_attach(bbuf, bsize));

    /* every pair, both directions, every mode and size */
    m = size + (size & 1);
    for (r = 0; r < m - 1; r++) {
        int peer = partner(rank, r, m);
        if (peer >= size)
            continue; /* bye */
        for (mode = 0; mode < NMODES; mode++) {
            if (rank < peer) {
                send_batch(mode, rank, peer);
                recv_batch(mode, rank, peer);
            } else {
                recv_batch(mode, rank, peer);
                send_batch(mode, rank, peer);
            }
        }
    }

    {
        void *addr = NULL;
        int dsize = -1;
        MPI_CHECK(MPI_Buffer_detach(&addr, &dsize));
        CHECK(addr == bbuf && dsize == bsize, "Buffer_detach gave %p/%d, attached %p/%d", addr,
              dsize, bbuf, bsize);
    }

    /* ANY_SOURCE / ANY_TAG */
    if (rank == 0) {
        int seen[8] = {0}, got, n;
        MPI_Status st;
        for (i = 1; i < size; i++) {
            MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE >= 1 && st.MPI_SOURCE < size, "ANY_SOURCE status source %d",
                  st.MPI_SOURCE);
            CHECK(!seen[st.MPI_SOURCE], "source %d seen twice", st.MPI_SOURCE);
            seen[st.MPI_SOURCE] = 1;
            CHECK(st.MPI_TAG == TAG_ANY_BASE + st.MPI_SOURCE, "ANY_TAG status tag %d from %d",
                  st.MPI_TAG, st.MPI_SOURCE);
            CHECK(got == st.MPI_SOURCE * 1000, "data %d from %d", got, st.MPI_SOURCE);
            MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
            CHECK(n == 1, "count %d", n);
        }
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        /* specific source, any tag */
        for (i = 1; i < size; i++) {
            MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, i, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == i && st.MPI_TAG == TAG_ANY_BASE + 50 + i && got == -i,
                  "source %d tag %d data %d", st.MPI_SOURCE, st.MPI_TAG, got);
        }
    } else {
        int v = rank * 1000;
        MPI_CHECK(MPI_Send(&v, 1, MPI_INT, 0, TAG_ANY_BASE + rank, MPI_COMM_WORLD));
        /* the wildcard receives above must not see the second message */
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        v = -rank;
        MPI_CHECK(MPI_Send(&v, 1, MPI_INT, 0, TAG_ANY_BASE + 50 + rank, MPI_COMM_WORLD));
    }

    /* small messages, and a ping-pong */
    {
        int peer = rank ^ 1, n, k, it, pass;
        unsigned char msg[SMALL_MAX + SLACK], got[SMALL_MAX + SLACK];
        /* pass 0: exact tags, TAG_SMALL_LATE messages interleaved; pass 1:
         * MPI_ANY_TAG (nothing else outstanding); pass 2: MPI_ANY_SOURCE;
         * pass 3: both (only the partner sends meanwhile) */
        for (pass = 0; pass < 4 && peer < size; pass++) {
            if (rank & 1) {
                for (n = 0; n <= SMALL_MAX; n++) {
                    for (k = 0; k < n; k++)
                        msg[k] = (unsigned char)(n * 7 + k + pass);
                    MPI_CHECK(MPI_Send(msg, n, MPI_BYTE, peer, TAG_SMALL, MPI_COMM_WORLD));
                    if (pass == 0 && n % 5 == 0)
                        MPI_CHECK(MPI_Send(msg, n, MPI_BYTE, peer, TAG_SMALL_LATE, MPI_COMM_WORLD));
                }
                continue;
            }
            for (n = 0; n <= SMALL_MAX; n++) {
                MPI_Status st;
                int c = -1;
                memset(got, 0xee, sizeof got);
                st.MPI_SOURCE = st.MPI_TAG = -999;
                st.MPI_ERROR = -12345;
                MPI_CHECK(MPI_Recv(got, n + SLACK, MPI_BYTE, pass >= 2 ? MPI_ANY_SOURCE : peer,
                                   pass % 2 ? MPI_ANY_TAG : TAG_SMALL, MPI_COMM_WORLD,
                                   n % 3 ? &st : MPI_STATUS_IGNORE));
                for (k = 0; k < n; k++)
                    CHECK(got[k] == (unsigned char)(n * 7 + k + pass), "small %d/%d: byte %d",
                          pass, n, k);
                for (k = n; k < n + SLACK; k++)
                    CHECK(got[k] == 0xee, "small %d/%d: byte %d past the message written", pass,
                          n, k);
                if (n % 3) {
                    MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &c));
                    CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == TAG_SMALL && c == n,
                          "small %d/%d: status %d/%d count %d", pass, n, st.MPI_SOURCE,
                          st.MPI_TAG, c);
                    CHECK(st.MPI_ERROR == -12345, "small %d/%d: MPI_ERROR set to %d", pass, n,
                          st.MPI_ERROR);
                }
            }
            for (n = 0; pass == 0 && n <= SMALL_MAX; n += 5) {
                MPI_Status st;
                int c = -1;
                MPI_CHECK(MPI_Recv(got, SMALL_MAX, MPI_BYTE, peer, TAG_SMALL_LATE, MPI_COMM_WORLD,
                                   &st));
                MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &c));
                CHECK(c == n, "late small %d: count %d", n, c);
                for (k = 0; k < n; k++)
                    CHECK(got[k] == (unsigned char)(n * 7 + k), "late small %d: byte %d", n, k);
            }
        }
        if (peer < size) {
            for (it = 0; it < 2000; it++) {
                long long v[1] = {0}, w = (long long)it * 3 + rank;
                MPI_Status st;
                if (rank & 1) {
                    MPI_CHECK(MPI_Recv(v, 1, MPI_LONG_LONG, it % 2 ? MPI_ANY_SOURCE : peer, TAG_PING,
                                       MPI_COMM_WORLD, &st));
                    CHECK(v[0] == (long long)it * 3 + peer && st.MPI_SOURCE == peer,
                          "ping %d: got %lld from %d", it, v[0], st.MPI_SOURCE);
                    MPI_CHECK(MPI_Send(&w, 1, MPI_LONG_LONG, peer, TAG_PING, MPI_COMM_WORLD));
                } else {
                    MPI_CHECK(MPI_Send(&w, 1, MPI_LONG_LONG, peer, TAG_PING, MPI_COMM_WORLD));
                    MPI_CHECK(MPI_Recv(v, 1, MPI_LONG_LONG, it % 2 ? MPI_ANY_SOURCE : peer,
                                       MPI_ANY_TAG, MPI_COMM_WORLD, &st));
                    CHECK(v[0] == (long long)it * 3 + peer && st.MPI_TAG == TAG_PING &&
                              st.MPI_SOURCE == peer,
                          "pong %d: got %lld tag %d from %d", it, v[0], st.MPI_TAG, st.MPI_SOURCE);
                }
            }
        }
    }

    /* MPI_PROC_NULL */
    {
        int v[4] = {1, 2, 3, 4}, n = -1;
        MPI_Status st;
        MPI_CHECK(MPI_Send(v, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Ssend(v, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Rsend(v, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
        st.MPI_SOURCE = st.MPI_TAG = -999;
        MPI_CHECK(MPI_Recv(v, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "PROC_NULL recv source %d", st.MPI_SOURCE);
        CHECK(st.MPI_TAG == MPI_ANY_TAG, "PROC_NULL recv tag %d", st.MPI_TAG);
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
        CHECK(n == 0, "PROC_NULL recv count %d", n);
        CHECK(v[0] == 1 && v[3] == 4, "PROC_NULL recv wrote the buffer");
    }

    /* zero-count receives: with MPI_BYTE and a NULL buffer, and (strict mode
     * only, Open MPI rejects it with MPI_ERR_TYPE) with MPI_DATATYPE_NULL */
    {
        int peer = rank ^ 1, k, nk = strict_mode() ? 2 : 1;
        if (peer < size) {
            for (k = 0; k < nk; k++) {
                MPI_Status st;
                int n = -1;
                if (rank & 1) {
                    MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, peer, TAG_ZERO + k, MPI_COMM_WORLD));
                } else {
                    MPI_CHECK(MPI_Recv(NULL, 0, k ? MPI_DATATYPE_NULL : MPI_BYTE, peer,
                                       TAG_ZERO + k, MPI_COMM_WORLD, &st));
                    CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == TAG_ZERO + k,
                          "zero-count status %d/%d", st.MPI_SOURCE, st.MPI_TAG);
                    MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
                    CHECK(n == 0, "zero-count Get_count %d", n);
                }
            }
        }
    }

    /* MPI_Sendrecv around a ring (small sizes take the small-message path:
     * the send completes inside the call, then the receive): data from the
     * left neighbour, status source/tag/count, with an exact source and tag,
     * MPI_ANY_SOURCE and MPI_ANY_TAG, and a receive buffer with guard bytes
     * past the message; sizes cross the eager limits. */
    {
        static const int sr_sizes[] = {0, 1, 8, 24, 40, 255, 4096, 40000, 70000};
        int right = (rank + 1) % size, left = (rank + size - 1) % size, k, i, round;
        unsigned char *sb = malloc(70000), *rb = malloc(70000 + 16);
        CHECK(sb && rb, "sendrecv buffers");
        /* every rank is past the sections above, whose MPI_ANY_SOURCE
         * receives must not see these messages */
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        for (round = 0; round < 3; round++) {
            for (k = 0; k < (int)(sizeof sr_sizes / sizeof sr_sizes[0]); k++) {
                int n = sr_sizes[k], cnt = -1, tag = TAG_SENDRECV + k;
                int src = round == 1 ? MPI_ANY_SOURCE : left, rtag = round == 2 ? MPI_ANY_TAG : tag;
                MPI_Status st;
                for (i = 0; i < n; i++)
                    sb[i] = (unsigned char)(rank * 31 + k * 7 + i);
                memset(rb, 0xee, (size_t)n + 16);
                st.MPI_SOURCE = st.MPI_TAG = -999;
                MPI_CHECK(MPI_Sendrecv(sb, n, MPI_BYTE, right, tag, rb, n + 16, MPI_BYTE, src, rtag,
                                       MPI_COMM_WORLD, &st));
                CHECK(st.MPI_SOURCE == left && st.MPI_TAG == tag, "sendrecv %d status %d/%d", n,
                      st.MPI_SOURCE, st.MPI_TAG);
                MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
                CHECK(cnt == n, "sendrecv %d count %d", n, cnt);
                for (i = 0; i < n; i++)
                    CHECK(rb[i] == (unsigned char)(left * 31 + k * 7 + i), "sendrecv %d byte %d", n, i);
                for (i = n; i < n + 16; i++)
                    CHECK(rb[i] == 0xee, "sendrecv %d wrote past the message at %d", n, i);
            }
        }
        free(sb);
        free(rb);
    }

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    free(sbuf);
    free(rbuf);
    free(bbuf);
    MPI_CHECK(MPI_Finalize());
    test_ok_rank(rank, "p2p_blocking");
    return 0;
}
