/* oxcoll: collective latency tests of the oxmpi-bench suite, in the style
 * of the OSU micro-benchmarks' osu_allreduce, osu_iallreduce, ... (see
 * ../SUITE.md, "Collectives", which is the authority for the method).
 *
 *     oxcoll [-t TESTS] [-s SIZES] [-q]
 *
 * TESTS: comma-separated names among barrier bcast reduce allreduce
 * allgather alltoall reduce_scatter_block and their non-blocking forms
 * ibarrier ibcast ... (default: all fourteen). Any number of ranks.
 *
 * Rank 0 prints `test,size,value,unit` on stdout per point: the latency
 * (us, the mean over the ranks of each rank's mean time per call); for a
 * non-blocking form also `TEST_overlap,size,PCT,%` (OSU's overlap:
 * max(0, 100 * (1 - (t_total - t_compute) / t_pure))). Exit codes: 1 for
 * usage errors, 2 for an allocation failure, 3 for a data check failure.
 *
 * Portable MPI + POSIX C11. Written for this project; no code from other
 * benchmark suites.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIZES 64

enum coll { C_BARRIER, C_BCAST, C_REDUCE, C_ALLREDUCE, C_ALLGATHER, C_ALLTOALL, C_RSB, C_COUNT };

static const char *const NAMES[C_COUNT] = {"barrier",   "bcast",    "reduce",
                                           "allreduce", "allgather", "alltoall",
                                           "reduce_scatter_block"};

static const size_t DEFAULT_SIZES[] = {8, 4096, 65536, 1048576};

static int g_rank, g_n;

static void *alloc_buf(size_t n) {
    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    if (n == 0) n = 1;
    if (posix_memalign(&p, (size_t)page, n) != 0) {
        fprintf(stderr, "oxcoll: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 2);
        exit(2);
    }
    memset(p, 0, n);
    return p;
}

/* The buffers of one point: sized for the largest size. */
struct bufs {
    float *s, *r;
};

/* Elements (floats) of one call at `size` bytes: for allgather and alltoall
 * the block per rank, for reduce_scatter_block the block per rank of a
 * `size`-byte vector, else the whole message. At least one. */
static int count_of(enum coll c, size_t size) {
    size_t n = size / sizeof(float);
    if (c == C_RSB) n /= (size_t)g_n;
    return n == 0 ? 1 : (int)n;
}

static void fill(enum coll c, struct bufs *b, int n) {
    size_t total = (size_t)n;
    if (c == C_ALLTOALL || c == C_RSB) total = (size_t)n * (size_t)g_n;
    for (size_t i = 0; i < total; i++) b->s[i] = (float)(g_rank + 1);
    if (c == C_BCAST && g_rank == 0)
        for (size_t i = 0; i < total; i++) b->s[i] = 7.0f;
}

static void blocking(enum coll c, struct bufs *b, int n) {
    switch (c) {
    case C_BARRIER: MPI_Barrier(MPI_COMM_WORLD); break;
    case C_BCAST: MPI_Bcast(b->s, n, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case C_REDUCE: MPI_Reduce(b->s, b->r, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
    case C_ALLREDUCE: MPI_Allreduce(b->s, b->r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case C_ALLGATHER:
        MPI_Allgather(b->s, n, MPI_FLOAT, b->r, n, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case C_ALLTOALL:
        MPI_Alltoall(b->s, n, MPI_FLOAT, b->r, n, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case C_RSB:
        MPI_Reduce_scatter_block(b->s, b->r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    default: break;
    }
}

static void start(enum coll c, struct bufs *b, int n, MPI_Request *q) {
    switch (c) {
    case C_BARRIER: MPI_Ibarrier(MPI_COMM_WORLD, q); break;
    case C_BCAST: MPI_Ibcast(b->s, n, MPI_FLOAT, 0, MPI_COMM_WORLD, q); break;
    case C_REDUCE:
        MPI_Ireduce(b->s, b->r, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, q);
        break;
    case C_ALLREDUCE:
        MPI_Iallreduce(b->s, b->r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, q);
        break;
    case C_ALLGATHER:
        MPI_Iallgather(b->s, n, MPI_FLOAT, b->r, n, MPI_FLOAT, MPI_COMM_WORLD, q);
        break;
    case C_ALLTOALL:
        MPI_Ialltoall(b->s, n, MPI_FLOAT, b->r, n, MPI_FLOAT, MPI_COMM_WORLD, q);
        break;
    case C_RSB:
        MPI_Ireduce_scatter_block(b->s, b->r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, q);
        break;
    default: break;
    }
}

/* The result of the last call checked (one element each end). */
static void check(enum coll c, const char *name, size_t size, struct bufs *b, int n) {
    float want = 0.0f;
    const float *at = b->r;
    size_t last = (size_t)n - 1;
    float sum = (float)g_n * (float)(g_n + 1) / 2.0f;
    switch (c) {
    case C_BARRIER: return;
    case C_BCAST: want = 7.0f; at = b->s; break;
    case C_REDUCE:
        if (g_rank != 0) return;
        want = sum;
        break;
    case C_ALLREDUCE:
    case C_RSB: want = sum; break;
    case C_ALLGATHER:
        /* Block 0 comes from rank 0, the last from rank n-1. */
        if (b->r[0] != 1.0f || b->r[(size_t)n * (size_t)g_n - 1] != (float)g_n) goto bad;
        return;
    case C_ALLTOALL:
        if (b->r[0] != 1.0f || b->r[(size_t)n * (size_t)g_n - 1] != (float)g_n) goto bad;
        return;
    default: return;
    }
    if (at[0] == want && at[last] == want) return;
bad:
    fprintf(stderr, "oxcoll: rank %d: %s: data check failed at size %zu\n", g_rank, name,
            size);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

/* Iteration counts by size: (default, warm-up). */
static void params(size_t size, int quick, int64_t *dflt, int64_t *warm) {
    if (size <= 8192) { *dflt = 2000; *warm = 200; }
    else if (size <= 65536) { *dflt = 500; *warm = 50; }
    else { *dflt = 100; *warm = 10; }
    if (quick) *warm = *warm / 4 + 1;
}

/* Rank 0 turns the warm-up time into an iteration count of about target_s
 * seconds, clamped to [5, dflt], and every rank uses it. */
static int64_t agree(double warm_s, int64_t warm, int64_t dflt, double target_s) {
    int64_t n = dflt;
    if (g_rank == 0 && warm > 0 && warm_s > 0.0) {
        double want = target_s / (warm_s / (double)warm);
        if (want < (double)dflt) n = (int64_t)want;
        if (n < 5) n = 5;
        if (n > dflt) n = dflt;
    }
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return n;
}

/* The mean over the ranks of `v` (on rank 0). */
static double mean(double v) {
    double s = 0.0;
    MPI_Reduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return s / g_n;
}

/* Busy for `secs` of wall time (OSU's dummy compute, without tests). */
static void compute(double secs) {
    double t = MPI_Wtime();
    volatile double x = 1.0;
    while (MPI_Wtime() - t < secs) x = x * 1.0000001 + 1e-9;
}

static void emit(const char *test, size_t size, double value, const char *unit) {
    printf("%s,%zu,%.4f,%s\n", test, size, value, unit);
    fflush(stdout);
}

static double blocking_loop(enum coll c, struct bufs *b, int n, int64_t iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int64_t i = 0; i < iters; i++) blocking(c, b, n);
    return MPI_Wtime() - t;
}

static double nb_loop(enum coll c, struct bufs *b, int n, int64_t iters) {
    MPI_Request q;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int64_t i = 0; i < iters; i++) {
        start(c, b, n, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
    }
    return MPI_Wtime() - t;
}

static void run(enum coll c, int nb, size_t size, int quick, struct bufs *b) {
    char name[64];
    snprintf(name, sizeof name, "%s%s", nb ? "i" : "", NAMES[c]);
    int n = count_of(c, size);
    double target = quick ? 0.03 : 0.1;
    int64_t dflt, warm;
    params(size, quick, &dflt, &warm);
    fill(c, b, n);
    double w = nb ? nb_loop(c, b, n, warm) : blocking_loop(c, b, n, warm);
    int64_t iters = agree(w, warm, dflt, nb ? target / 3 : target);
    if (!nb) {
        double t = blocking_loop(c, b, n, iters);
        check(c, name, size, b, n);
        double us = mean(t * 1e6 / (double)iters);
        if (g_rank == 0) emit(name, size, us, "us");
        return;
    }
    double pure = nb_loop(c, b, n, iters) / (double)iters;
    check(c, name, size, b, n);
    /* Every rank computes for the mean pure time, as OSU does. */
    double pure_all = 0.0;
    MPI_Allreduce(&pure, &pure_all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    pure_all /= g_n;
    MPI_Request q;
    double tcomp = 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int64_t i = 0; i < iters; i++) {
        start(c, b, n, &q);
        double t1 = MPI_Wtime();
        compute(pure_all);
        tcomp += MPI_Wtime() - t1;
        MPI_Wait(&q, MPI_STATUS_IGNORE);
    }
    double total = (MPI_Wtime() - t) / (double)iters;
    tcomp /= (double)iters;
    check(c, name, size, b, n);
    double ov = 100.0 * (1.0 - (total - tcomp) / pure);
    if (ov < 0.0) ov = 0.0;
    if (ov > 100.0) ov = 100.0;
    double pure_m = mean(pure * 1e6), ov_m = mean(ov);
    if (g_rank == 0) {
        emit(name, size, pure_m, "us");
        char oname[80];
        snprintf(oname, sizeof oname, "%s_overlap", name);
        emit(oname, size, ov_m, "%");
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: oxcoll [-t TESTS] [-s SIZES] [-q]\n"
               "  TESTS: comma-separated among barrier bcast reduce allreduce allgather\n"
               "         alltoall reduce_scatter_block and the same with an i prefix\n"
               "  SIZES: comma-separated bytes (default 8,4096,65536,1048576)\n");
}

int main(int argc, char **argv) {
    int want[2][C_COUNT];
    size_t sizes[MAX_SIZES];
    int nsizes = 0, quick = 0, bad = 0, any = 0;
    memset(want, 0, sizeof want);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
            char *p = argv[++i];
            while (*p && nsizes < MAX_SIZES) {
                char *end;
                unsigned long long v = strtoull(p, &end, 10);
                if (end == p || v > (1ull << 27)) { bad = 1; break; }
                sizes[nsizes++] = (size_t)v;
                p = *end == ',' ? end + 1 : end;
                if (*end && *end != ',') { bad = 1; break; }
            }
        } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            char *list = strdup(argv[++i]);
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                int nb = tok[0] == 'i'; /* no blocking name starts with i */
                const char *base = nb ? tok + 1 : tok;
                int found = 0;
                for (int c = 0; c < C_COUNT; c++)
                    if (strcmp(base, NAMES[c]) == 0) { want[nb][c] = 1; found = 1; any = 1; }
                if (!found) bad = 1;
            }
            free(list);
        } else {
            bad = 1;
        }
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_n);
    if (bad) {
        if (g_rank == 0) usage(stderr);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 1;
    }
    if (!any)
        for (int c = 0; c < C_COUNT; c++) want[0][c] = want[1][c] = 1;
    if (nsizes == 0) {
        nsizes = (int)(sizeof DEFAULT_SIZES / sizeof DEFAULT_SIZES[0]);
        memcpy(sizes, DEFAULT_SIZES, sizeof DEFAULT_SIZES);
    }
    size_t maxb = 16;
    for (int i = 0; i < nsizes; i++) {
        size_t per = sizes[i] < sizeof(float) ? sizeof(float) : sizes[i];
        if (per * (size_t)g_n > maxb) maxb = per * (size_t)g_n;
    }
    struct bufs b = {alloc_buf(maxb), alloc_buf(maxb)};
    for (int nb = 0; nb < 2; nb++)
        for (int c = 0; c < C_COUNT; c++) {
            if (!want[nb][c]) continue;
            if (c == C_BARRIER) {
                run((enum coll)c, nb, 0, quick, &b);
                continue;
            }
            for (int i = 0; i < nsizes; i++) run((enum coll)c, nb, sizes[i], quick, &b);
        }
    free(b.s);
    free(b.r);
    MPI_Finalize();
    return 0;
}
