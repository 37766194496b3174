/*
 * buffers.c -- the buffers of buffered sends, MPI 4.1 (section 3.6).
 *
 * Checks:
 *  - MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC): buffered sends of more data
 *    than any fixed buffer would hold all succeed and arrive;
 *    MPI_Buffer_detach gives MPI_BUFFER_AUTOMATIC back with size 0.
 *  - MPI_Comm_attach_buffer: a communicator's own buffer serves its
 *    buffered sends while the process has none (a buffered send on
 *    MPI_COMM_WORLD then fails with MPI_ERR_BUFFER); a message larger than
 *    the free space is MPI_ERR_BUFFER; Comm_flush_buffer and
 *    Comm_iflush_buffer; Comm_detach_buffer gives back the address and the
 *    size attached; a second attach to the same communicator is an error.
 *  - MPI_Buffer_iflush does not block: every rank sends 1 MiB buffered to
 *    its right neighbour, starts a flush, and only then receives from its
 *    left one (a blocking flush of a rendezvous-sized message would wait
 *    for a receive that is never posted).
 *  - MPI_Session_attach_buffer: a communicator made from the group of a
 *    session's process set uses the session's buffer; Session_flush_buffer,
 *    Session_iflush_buffer, Session_detach_buffer.
 * Runs on one rank too. Needs MPI 4.1 (elsewhere it checks nothing and
 * says ok).
 */
#include "check.h"

#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
#define HAVE_MPI41 1
#else
#define HAVE_MPI41 0
#endif

#define BIG (1 << 20)

static int rank, size;

#if HAVE_MPI41

static void automatic(void)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size, i, n = 64;
    int *out = malloc(sizeof(int) * 4096), *in = malloc(sizeof(int) * 4096);
    void *addr = NULL;
    int sz = -1;
    MPI_CHECK(MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0));
    /* 64 messages of 16 KiB: 1 MiB outstanding, no buffer sized for it */
    for (i = 0; i < n; i++) {
        int j;
        for (j = 0; j < 4096; j++)
            out[j] = rank * 100000 + i * 4096 + j;
        MPI_CHECK(MPI_Bsend(out, 4096, MPI_INT, right, i, MPI_COMM_WORLD));
    }
    for (i = 0; i < n; i++) {
        int j;
        MPI_CHECK(MPI_Recv(in, 4096, MPI_INT, left, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (j = 0; j < 4096; j++)
            CHECK(in[j] == left * 100000 + i * 4096 + j, "automatic: message %d[%d] = %d", i,
                  j, in[j]);
    }
    MPI_CHECK(MPI_Buffer_detach(&addr, &sz));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && sz == 0, "detach gave %p, %d", addr, sz);
    free(out);
    free(in);
}

static void per_comm(void)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size, rc, v = rank, got = -1;
    int cap = 4 * (4096 + MPI_BSEND_OVERHEAD);
    char *space = malloc((size_t)cap);
    char big[5000];
    void *addr = NULL;
    int sz = -1;
    MPI_Comm dup;
    MPI_Request req;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_attach_buffer(dup, space, cap));
    rc = MPI_Comm_attach_buffer(dup, space, cap);
    CHECK(rc != MPI_SUCCESS, "a second buffer attached to one communicator");
    /* the process has no buffer: WORLD's buffered sends fail */
    rc = MPI_Bsend(&v, 1, MPI_INT, right, 1, MPI_COMM_WORLD);
    {
        int cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_BUFFER, "Bsend on WORLD without a buffer: class %d", cls);
    }
    /* the communicator's buffer serves its own */
    MPI_CHECK(MPI_Bsend(&v, 1, MPI_INT, right, 2, dup));
    MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, left, 2, dup, MPI_STATUS_IGNORE));
    CHECK(got == left, "comm buffer: got %d from %d", got, left);
    MPI_CHECK(MPI_Comm_flush_buffer(dup));
    /* larger than the buffer: MPI_ERR_BUFFER */
    {
        char *huge = calloc(1, (size_t)cap * 2);
        int cls = -1;
        rc = MPI_Bsend(huge, cap * 2, MPI_CHAR, right, 3, dup);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_BUFFER, "a message larger than the buffer: class %d", cls);
        free(huge);
    }
    memset(big, rank, sizeof big);
    MPI_CHECK(MPI_Bsend(big, (int)sizeof big, MPI_CHAR, right, 4, dup));
    MPI_CHECK(MPI_Comm_iflush_buffer(dup, &req));
    MPI_CHECK(MPI_Recv(big, (int)sizeof big, MPI_CHAR, left, 4, dup, MPI_STATUS_IGNORE));
    CHECK(big[0] == (char)left && big[sizeof big - 1] == (char)left, "comm buffer: big message");
    MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Comm_detach_buffer(dup, &addr, &sz));
    CHECK(addr == space && sz == cap, "Comm_detach_buffer gave %p %d, attached %p %d", addr, sz,
          (void *)space, cap);
    MPI_CHECK(MPI_Comm_free(&dup));
    free(space);
}

static void nonblocking_flush(void)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size, i;
    char *out = malloc(BIG), *in = malloc(BIG);
    MPI_Request req;
    void *addr;
    int sz;
    for (i = 0; i < BIG; i++)
        out[i] = (char)(rank + i);
    MPI_CHECK(MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0));
    MPI_CHECK(MPI_Bsend(out, BIG, MPI_CHAR, right, 9, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Buffer_iflush(&req));
    MPI_CHECK(MPI_Recv(in, BIG, MPI_CHAR, left, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (i = 0; i < BIG; i++)
        CHECK(in[i] == (char)(left + i), "iflush: byte %d", i);
    MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Buffer_flush());
    MPI_CHECK(MPI_Buffer_detach(&addr, &sz));
    free(out);
    free(in);
}

static void per_session(void)
{
    MPI_Session ses;
    MPI_Group g;
    MPI_Comm c;
    MPI_Request req;
    void *addr = NULL;
    int sz = -1, r, n, v, got = -1;
    MPI_CHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &ses));
    MPI_CHECK(MPI_Session_attach_buffer(ses, MPI_BUFFER_AUTOMATIC, 0));
    MPI_CHECK(MPI_Group_from_session_pset(ses, "mpi://WORLD", &g));
    MPI_CHECK(MPI_Comm_create_from_group(g, "buffers.c", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    MPI_CHECK(MPI_Group_free(&g));
    MPI_CHECK(MPI_Comm_rank(c, &r));
    MPI_CHECK(MPI_Comm_size(c, &n));
    v = r * 7;
    /* no process or communicator buffer: the session's serves */
    MPI_CHECK(MPI_Bsend(&v, 1, MPI_INT, (r + 1) % n, 5, c));
    MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, (r + n - 1) % n, 5, c, MPI_STATUS_IGNORE));
    CHECK(got == ((r + n - 1) % n) * 7, "session buffer: got %d", got);
    MPI_CHECK(MPI_Session_flush_buffer(ses));
    MPI_CHECK(MPI_Session_iflush_buffer(ses, &req));
    MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Comm_free(&c));
    MPI_CHECK(MPI_Session_detach_buffer(ses, &addr, &sz));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && sz == 0, "Session_detach_buffer gave %p %d", addr, sz);
    MPI_CHECK(MPI_Session_finalize(&ses));
}

#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_errors_return();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#if HAVE_MPI41
    automatic();
    per_comm();
    nonblocking_flush();
    per_session();
#endif
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok("buffers");
    MPI_Finalize();
    return 0;
}
