/*
 * check.h -- tiny self-check helpers shared by the oxmpi C test programs.
 *
 * Every program includes this header first (it sets _POSIX_C_SOURCE so the
 * programs build with -std=c11 and still see nanosleep/pthread/setenv).
 *
 *   CHECK(cond, fmt, ...)  on failure prints
 *                            FAIL <file>:<line>: <what> (rank r)
 *                          to stderr and calls MPI_Abort(MPI_COMM_WORLD, 1)
 *                          (or exit(1) when MPI is not initialized or already
 *                          finalized).
 *   MPI_CHECK(call)        CHECK that an MPI call returned MPI_SUCCESS; the
 *                          message names the call and its error string.  Use
 *                          it after setting MPI_ERRORS_RETURN (see
 *                          test_errors_return()), otherwise errors are fatal
 *                          inside the library anyway.
 *   strict_mode()          true when the environment variable OXMPI_STRICT is
 *                          set to a non-empty value other than "0".  Checks
 *                          that the MPI standard leaves to the implementation
 *                          (garbage handles, ...) run only in strict mode; see
 *                          README.md.
 *   lenient_mpi()          built against Open MPI outside strict mode: skip the
 *                          few checks where Open MPI 5.0 departs (see there).
 *   test_ok(name)          rank 0 prints the single "ok: <name>" line.
 */
#ifndef OXMPI_CTEST_CHECK_H
#define OXMPI_CTEST_CHECK_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <mpi.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline int check_world_rank(void)
{
    int init = 0, fin = 0, r = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4), noreturn))
#endif
static inline void check_fail(const char *file, int line, const char *fmt, ...)
{
    int init = 0, fin = 0;
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL %s:%d: %s (rank %d)\n", file, line, what, check_world_rank());
    fflush(stderr);
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond))                                      \
            check_fail(__FILE__, __LINE__, __VA_ARGS__);  \
    } while (0)

/* Error string of an MPI return code, for messages (static buffer). */
static inline const char *check_errstr(int code)
{
    static char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    s[0] = '\0';
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "(no error string)");
    return s;
}

#define MPI_CHECK(call)                                                    \
    do {                                                                   \
        int check_rc_ = (call);                                            \
        if (check_rc_ != MPI_SUCCESS)                                      \
            check_fail(__FILE__, __LINE__, "%s returned %d: %s", #call,    \
                       check_rc_, check_errstr(check_rc_));                \
    } while (0)

/* The error class of a return code. */
static inline int check_class(int code)
{
    int cls = -1;
    if (MPI_Error_class(code, &cls) != MPI_SUCCESS)
        return -1;
    return cls;
}

/* Expect a call to fail with error class `cls` (MPI_ERRORS_RETURN must be set
 * on the communicator involved, and on MPI_COMM_SELF for errors that are not
 * attached to a communicator). */
#define CHECK_CLASS(call, cls)                                                  \
    do {                                                                        \
        int check_rc_ = (call);                                                 \
        int check_cls_ = check_class(check_rc_);                                \
        if (check_rc_ == MPI_SUCCESS || check_cls_ != (cls))                    \
            check_fail(__FILE__, __LINE__,                                      \
                       "%s returned %d (class %d) but class %s (%d) expected",  \
                       #call, check_rc_, check_cls_, #cls, (int)(cls));         \
    } while (0)

/* Errors return on COMM_WORLD and COMM_SELF from here on. */
static inline void test_errors_return(void)
{
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
}

static inline int strict_mode(void)
{
    const char *s = getenv("OXMPI_STRICT");
    return s != NULL && s[0] != '\0' && strcmp(s, "0") != 0;
}

/* Built against Open MPI and not in strict mode: the few checks of error
 * classes and string lengths where Open MPI 5.0 departs from the standard
 * (or from what MPICH and oxmpi do where it is silent) are skipped; each
 * such place says what Open MPI does. */
static inline int lenient_mpi(void)
{
#ifdef OPEN_MPI
    return !strict_mode();
#else
    return 0;
#endif
}

static inline void sleep_ms(int ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Rank 0 prints the one success line. Call it before MPI_Finalize (or pass
 * the rank explicitly with test_ok_rank after it). */
static inline void test_ok_rank(int rank, const char *name)
{
    if (rank == 0) {
        printf("ok: %s\n", name);
        fflush(stdout);
    }
}

static inline void test_ok(const char *name)
{
    test_ok_rank(check_world_rank(), name);
}

#endif /* OXMPI_CTEST_CHECK_H */
