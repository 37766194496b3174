/* Point-to-point through the C ABI: every send mode, non-blocking and
 * persistent requests, statuses, probes, PROC_NULL, truncation and
 * argument errors under MPI_ERRORS_RETURN. At least 2 ranks. Prints
 * "p2p ok" on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The error class of a return code (errors return codes, not classes). */
static int cls_of(int code) {
    int c = -1;
    MPI_Error_class(code, &c);
    return c;
}

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "p2p FAILED (rank %d, line %d): ", rank, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static int rank, size;

int main(int argc, char **argv) {
    int provided, flag, count;
    MPI_Status st;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks");
    MPI_Query_thread(&flag);
    CHECK(flag == provided, "query_thread %d provided %d", flag, provided);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* Sizes across the protocol thresholds, standard and synchronous. */
    int sizes[] = {0, 1, 300, 70000, 1 << 20};
    for (int i = 0; i < 5; i++) {
        int len = sizes[i];
        char *out = malloc(len + 1), *in = malloc(len + 1);
        for (int j = 0; j < len; j++) out[j] = (char)(j * 7 + rank);
        MPI_Request rq[2];
        MPI_Irecv(in, len, MPI_CHAR, prev, 1, MPI_COMM_WORLD, &rq[0]);
        if (i % 2) MPI_Issend(out, len, MPI_CHAR, next, 1, MPI_COMM_WORLD, &rq[1]);
        else MPI_Isend(out, len, MPI_CHAR, next, 1, MPI_COMM_WORLD, &rq[1]);
        MPI_Status sts[2];
        MPI_Waitall(2, rq, sts);
        CHECK(rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL, "requests not reset");
        MPI_Get_count(&sts[0], MPI_CHAR, &count);
        CHECK(count == len && sts[0].MPI_SOURCE == prev && sts[0].MPI_TAG == 1, "status of %d: count %d src %d", len, count, sts[0].MPI_SOURCE);
        for (int j = 0; j < len; j++) CHECK(in[j] == (char)(j * 7 + prev), "data at %d of %d", j, len);
        free(out); free(in);
    }

    /* ANY_SOURCE / ANY_TAG, probe, iprobe. */
    int v = rank * 10, w = -1;
    MPI_Sendrecv(&v, 1, MPI_INT, next, 5, &w, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    CHECK(w == prev * 10 && st.MPI_SOURCE == prev && st.MPI_TAG == 5, "sendrecv got %d from %d", w, st.MPI_SOURCE);
    MPI_Send(&v, 1, MPI_INT, next, 6, MPI_COMM_WORLD);
    MPI_Probe(prev, 6, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 1 && st.MPI_TAG == 6, "probe");
    MPI_Iprobe(prev, 6, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    CHECK(flag, "iprobe after probe");
    MPI_Recv(&w, 1, MPI_INT, prev, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Iprobe(MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    CHECK(!flag, "iprobe found a received message");

    /* Persistent requests, 10 starts, data changing. */
    int ps = 0, pr = -1;
    MPI_Request p[2];
    MPI_Recv_init(&pr, 1, MPI_INT, prev, 8, MPI_COMM_WORLD, &p[0]);
    MPI_Send_init(&ps, 1, MPI_INT, next, 8, MPI_COMM_WORLD, &p[1]);
    st.MPI_SOURCE = 99;
    MPI_Wait(&p[0], &st);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG, "inactive persistent: empty status");
    for (int it = 0; it < 10; it++) {
        ps = rank * 100 + it;
        MPI_Startall(2, p);
        MPI_Waitall(2, p, MPI_STATUSES_IGNORE);
        CHECK(pr == prev * 100 + it, "persistent iteration %d got %d", it, pr);
        CHECK(p[0] != MPI_REQUEST_NULL, "persistent handle reset");
    }
    MPI_Request_free(&p[0]);
    MPI_Request_free(&p[1]);

    /* Test loop. */
    MPI_Request r1;
    MPI_Irecv(&w, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &r1);
    MPI_Send(&v, 1, MPI_INT, next, 9, MPI_COMM_WORLD);
    for (flag = 0; !flag;) MPI_Test(&r1, &flag, &st);
    CHECK(w == prev * 10 && r1 == MPI_REQUEST_NULL, "test");
    /* Null request: the empty status (any source, any tag, MPI_SUCCESS). */
    st.MPI_ERROR = -12345;
    MPI_Wait(&r1, &st);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_ERROR == MPI_SUCCESS, "empty status of a null request");
    /* A real completion leaves MPI_ERROR alone. */
    MPI_Irecv(&w, 1, MPI_INT, prev, 11, MPI_COMM_WORLD, &r1);
    MPI_Send(&v, 1, MPI_INT, next, 11, MPI_COMM_WORLD);
    st.MPI_ERROR = -12345;
    MPI_Wait(&r1, &st);
    CHECK(st.MPI_SOURCE == prev && st.MPI_ERROR == -12345, "MPI_Wait wrote MPI_ERROR");

    /* PROC_NULL. */
    MPI_Send(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
    MPI_Recv(&w, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0, "PROC_NULL status");

    /* The error of a request goes to its communicator's handler (here
     * ERRORS_RETURN, while MPI_COMM_WORLD's is still fatal). */
    {
        MPI_Comm d;
        MPI_Request rq;
        int big8[8] = {0}, small4[4];
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN);
        MPI_Irecv(small4, 4, MPI_INT, prev, 12, d, &rq);
        MPI_Send(big8, 8, MPI_INT, next, 12, d);
        int e = MPI_Wait(&rq, MPI_STATUS_IGNORE);
        CHECK(cls_of(e) == MPI_ERR_TRUNCATE, "MPI_Wait on a request of an ERRORS_RETURN communicator gave %d", e);
        MPI_Comm_free(&d);
    }

    /* Errors are returned under MPI_ERRORS_RETURN, with their classes. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int e, cls;
    e = MPI_Send(&v, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_RANK, "bad rank gave %d", cls);
    e = MPI_Send(&v, -1, MPI_INT, next, 0, MPI_COMM_WORLD);
    CHECK(cls_of(e) == MPI_ERR_COUNT, "negative count gave %d", e);
    e = MPI_Send(&v, 1, MPI_INT, next, -5, MPI_COMM_WORLD);
    CHECK(cls_of(e) == MPI_ERR_TAG, "negative tag gave %d", e);
    e = MPI_Send(&v, 1, MPI_DATATYPE_NULL, next, 0, MPI_COMM_WORLD);
    CHECK(cls_of(e) == MPI_ERR_TYPE, "null datatype gave %d", e);
    e = MPI_Send(&v, 1, MPI_INT, next, 0, (MPI_Comm)(intptr_t)0x7ff);
    CHECK(cls_of(e) == MPI_ERR_COMM, "garbage communicator gave %d", e);
    MPI_Request junk = (MPI_Request)(intptr_t)0x123456;
    e = MPI_Wait(&junk, MPI_STATUS_IGNORE);
    CHECK(cls_of(e) == MPI_ERR_REQUEST, "garbage request gave %d", e);
    int big[8] = {1, 2, 3, 4, 5, 6, 7, 8}, small[4] = {0};
    MPI_Send(big, 8, MPI_INT, next, 10, MPI_COMM_WORLD);
    e = MPI_Recv(small, 4, MPI_INT, prev, 10, MPI_COMM_WORLD, &st);
    CHECK(cls_of(e) == MPI_ERR_TRUNCATE && small[3] == 4, "truncation gave %d, kept %d", e, small[3]);
    char msg[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(MPI_ERR_TRUNCATE, msg, &len);
    CHECK(len > 0 && strstr(msg, "TRUNCATE"), "error string '%s'", msg);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("p2p ok\n");
    MPI_Finalize();
    MPI_Finalized(&flag);
    return flag ? 0 : 1;
}
