/*
 * errhandlers.c -- error codes, classes and strings; error handlers the
 * program creates. Any number of ranks from 1.
 *
 *  - Under MPI_ERRORS_RETURN, MPI_Send to rank `size` returns a code of
 *    class MPI_ERR_RANK with a non-empty string (strict: the string names
 *    MPI_Send and the rank's value, and the code is not the bare class, as
 *    in MPICH); MPI_Recv of a message too long gives a code of class
 *    MPI_ERR_TRUNCATE (strict: MPI_Waitall of such a receive returns
 *    MPI_ERR_IN_STATUS itself, as MPICH does); every class's string is
 *    non-empty.
 *  - A handler made by MPI_Comm_create_errhandler, set on a duplicate of
 *    MPI_COMM_WORLD, is called once per failed call with that
 *    communicator and the failed call's code (class MPI_ERR_RANK), and the
 *    call returns (strict: that code); MPI_Comm_get_errhandler gives it
 *    back; after MPI_Errhandler_free of the program's handles the
 *    communicator still uses it; MPI_Comm_dup passes it on;
 *    MPI_Comm_call_errhandler calls it with the given code and returns
 *    MPI_SUCCESS.
 *  - MPI_Add_error_class / MPI_Add_error_code / MPI_Add_error_string:
 *    new values above MPI_ERR_LASTCODE, the code's class found back
 *    (strict: the class's too), the string
 *    given back by MPI_Error_string, MPI_LASTUSEDCODE at least the new class;
 *    a user code goes to a handler through MPI_Comm_call_errhandler.
 *  - MPI 4.1: MPI_Remove_error_string / _code / _class.
 *  - MPI_Add_error_string on a predefined class fails (strict).
 */
#include "check.h"

static int calls;
static MPI_Comm seen_comm;
static int seen_code;

static void record(MPI_Comm *comm, int *code, ...)
{
    calls++;
    seen_comm = *comm;
    seen_code = *code;
}

/* Whether `s` contains the decimal number `n`. */
static int has_number(const char *s, int n)
{
    char num[32];
    snprintf(num, sizeof num, "%d", n);
    return strstr(s, num) != NULL;
}

int main(int argc, char **argv)
{
    int rank, size, v = 1, rc, cls, len;
    char msg[MPI_MAX_ERROR_STRING];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_errors_return();

    /* ---- Codes of failed calls. */
    rc = MPI_Send(&v, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_RANK);
    MPI_CHECK(MPI_Error_string(rc, msg, &len));
    CHECK(len > 0 && (int)strlen(msg) == len, "string of a rank error: '%s' (%d)", msg, len);
    if (strict_mode()) {
        CHECK(rc != MPI_ERR_RANK, "MPI_Send returned the bare class %d", rc);
        CHECK(strstr(msg, "MPI_Send") != NULL && has_number(msg, size),
              "the string does not name MPI_Send and rank %d: '%s'", size, msg);
    }
    {
        int big[4] = {1, 2, 3, 4}, small[2];
        MPI_Status st;
        MPI_Request rq;
        MPI_CHECK(MPI_Isend(big, 4, MPI_INT, 0, 7, MPI_COMM_SELF, &rq));
        rc = MPI_Recv(small, 2, MPI_INT, 0, 7, MPI_COMM_SELF, &st);
        CHECK_CLASS(rc, MPI_ERR_TRUNCATE);
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Error_string(rc, msg, &len));
        CHECK(len > 0, "empty string for a truncation");
        if (strict_mode()) {
            /* MPI_Waitall's MPI_ERR_IN_STATUS is the class itself (as in
             * MPICH: programs compare with it), the status a code. */
            MPI_Request rs[2];
            MPI_Status sts[2];
            MPI_CHECK(MPI_Irecv(small, 2, MPI_INT, 0, 9, MPI_COMM_SELF, &rs[0]));
            MPI_CHECK(MPI_Isend(big, 4, MPI_INT, 0, 9, MPI_COMM_SELF, &rs[1]));
            rc = MPI_Waitall(2, rs, sts);
            CHECK(rc == MPI_ERR_IN_STATUS, "Waitall returned %d, not MPI_ERR_IN_STATUS", rc);
            CHECK(check_class(sts[0].MPI_ERROR) == MPI_ERR_TRUNCATE, "status error %d",
                  sts[0].MPI_ERROR);
        }
    }
    static const int classes[] = {
        MPI_SUCCESS,       MPI_ERR_BUFFER,   MPI_ERR_COUNT,    MPI_ERR_TYPE,     MPI_ERR_TAG,
        MPI_ERR_COMM,      MPI_ERR_RANK,     MPI_ERR_REQUEST,  MPI_ERR_ROOT,     MPI_ERR_GROUP,
        MPI_ERR_OP,        MPI_ERR_TOPOLOGY, MPI_ERR_DIMS,     MPI_ERR_ARG,      MPI_ERR_UNKNOWN,
        MPI_ERR_TRUNCATE,  MPI_ERR_OTHER,    MPI_ERR_INTERN,   MPI_ERR_PENDING,  MPI_ERR_IN_STATUS,
        MPI_ERR_KEYVAL,    MPI_ERR_NO_MEM,   MPI_ERR_INFO_KEY, MPI_ERR_INFO_NOKEY, MPI_ERR_WIN,
        MPI_ERR_FILE,      MPI_ERR_SESSION,  MPI_ERR_UNSUPPORTED_OPERATION,
    };
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        int c = classes[i], k = -1;
        MPI_CHECK(MPI_Error_class(c, &k));
        CHECK(k == c, "class of class %d is %d", c, k);
        MPI_CHECK(MPI_Error_string(c, msg, &len));
        CHECK(len > 0, "class %d has an empty string", c);
    }

    /* ---- A handler of the program's. */
    MPI_Comm dup, dup2;
    MPI_Errhandler eh, got;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_CHECK(MPI_Comm_create_errhandler(record, &eh));
    MPI_CHECK(MPI_Comm_set_errhandler(dup, eh));
    MPI_CHECK(MPI_Comm_get_errhandler(dup, &got));
    CHECK(got == eh, "Comm_get_errhandler gave another handler");
    MPI_CHECK(MPI_Errhandler_free(&got));
    CHECK(got == MPI_ERRHANDLER_NULL, "Errhandler_free did not null the handle");
    MPI_CHECK(MPI_Errhandler_free(&eh));

    calls = 0;
    rc = MPI_Send(&v, 1, MPI_INT, size, 0, dup);
    CHECK(calls == 1, "the handler ran %d times", calls);
    CHECK(seen_comm == dup, "the handler was given another communicator");
    CHECK(check_class(seen_code) == MPI_ERR_RANK, "the handler got class %d",
          check_class(seen_code));
    /* The standard: the handler gets "the error code to be returned by
     * the MPI routine"; MPICH 5 returns MPI_SUCCESS once it returns. */
    if (strict_mode())
        CHECK(rc == seen_code, "returned %d, handler got %d", rc, seen_code);

    /* A duplicate inherits it. */
    MPI_CHECK(MPI_Comm_dup(dup, &dup2));
    calls = 0;
    rc = MPI_Send(&v, 1, MPI_INT, 0, -5, dup2);
    CHECK(calls == 1 && seen_comm == dup2, "the duplicate's handler ran %d times", calls);
    CHECK(check_class(seen_code) == MPI_ERR_TAG, "the handler got class %d",
          check_class(seen_code));

    /* MPI_Comm_call_errhandler. */
    calls = 0;
    MPI_CHECK(MPI_Comm_call_errhandler(dup, MPI_ERR_OTHER));
    CHECK(calls == 1 && seen_comm == dup && seen_code == MPI_ERR_OTHER,
          "call_errhandler: %d calls, code %d", calls, seen_code);
    /* Communication still works on it. */
    {
        int x = rank, y = -1;
        MPI_CHECK(MPI_Sendrecv(&x, 1, MPI_INT, (rank + 1) % size, 3, &y, 1, MPI_INT,
                               (rank + size - 1) % size, 3, dup, MPI_STATUS_IGNORE));
        CHECK(y == (rank + size - 1) % size, "got %d", y);
    }

    /* ---- Classes, codes and strings of the program. */
    int myclass, mycode, mycode2, last = 0, flag = 0;
    int *lastp = NULL;
    MPI_CHECK(MPI_Add_error_class(&myclass));
    MPI_CHECK(MPI_Add_error_code(myclass, &mycode));
    MPI_CHECK(MPI_Add_error_code(myclass, &mycode2));
    CHECK(myclass > MPI_ERR_LASTCODE && mycode > MPI_ERR_LASTCODE && mycode2 > MPI_ERR_LASTCODE,
          "added values %d %d %d not above MPI_ERR_LASTCODE %d", myclass, mycode, mycode2,
          MPI_ERR_LASTCODE);
    CHECK(mycode != mycode2 && mycode != myclass, "added values repeat");
    MPI_CHECK(MPI_Error_class(mycode, &cls));
    CHECK(cls == myclass, "class of the added code is %d, not %d", cls, myclass);
    if (strict_mode()) {
        /* A class is its own class (Open MPI 5 says MPI_ERR_UNKNOWN). */
        MPI_CHECK(MPI_Error_class(myclass, &cls));
        CHECK(cls == myclass, "class of the added class is %d", cls);
    }
    MPI_CHECK(MPI_Add_error_string(mycode, "the widget is out of sprockets"));
    MPI_CHECK(MPI_Add_error_string(myclass, "widget trouble"));
    MPI_CHECK(MPI_Error_string(mycode, msg, &len));
    CHECK(strcmp(msg, "the widget is out of sprockets") == 0 && len == (int)strlen(msg),
          "string of the added code: '%s' (%d)", msg, len);
    MPI_CHECK(MPI_Error_string(myclass, msg, &len));
    CHECK(strcmp(msg, "widget trouble") == 0, "string of the added class: '%s'", msg);
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastp, &flag));
    CHECK(flag && lastp != NULL, "no MPI_LASTUSEDCODE");
    last = *lastp;
    /* The largest class in use (MPICH numbers codes above it). */
    CHECK(last >= myclass && last >= MPI_ERR_LASTCODE, "MPI_LASTUSEDCODE %d below the class %d",
          last, myclass);
    calls = 0;
    MPI_CHECK(MPI_Comm_call_errhandler(dup2, mycode));
    CHECK(calls == 1 && seen_code == mycode && seen_comm == dup2,
          "call_errhandler with an added code: %d calls, code %d", calls, seen_code);
    if (strict_mode()) {
        rc = MPI_Add_error_string(MPI_ERR_RANK, "mine now");
        CHECK_CLASS(rc, MPI_ERR_ARG);
        rc = MPI_Add_error_code(MPI_ERR_LASTCODE + 1000000, &mycode2);
        CHECK_CLASS(rc, MPI_ERR_ARG);
    }

#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
    /* A code or class that still has a string, or a class that still has
     * codes, cannot be removed. */
    rc = MPI_Remove_error_code(mycode);
    CHECK(rc != MPI_SUCCESS, "removed a code that still has a string");
    rc = MPI_Remove_error_class(myclass);
    CHECK(rc != MPI_SUCCESS, "removed a class that still has codes");
    MPI_CHECK(MPI_Remove_error_string(mycode));
    MPI_CHECK(MPI_Error_string(mycode, msg, &len));
    CHECK(len == 0 && msg[0] == '\0', "string after Remove_error_string: '%s'", msg);
    MPI_CHECK(MPI_Remove_error_code(mycode));
    MPI_CHECK(MPI_Remove_error_code(mycode2));
    MPI_CHECK(MPI_Remove_error_string(myclass));
    MPI_CHECK(MPI_Remove_error_class(myclass));
#endif

    MPI_CHECK(MPI_Comm_free(&dup2));
    MPI_CHECK(MPI_Comm_free(&dup));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok("errhandlers");
    MPI_Finalize();
    return 0;
}
