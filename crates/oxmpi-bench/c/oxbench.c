/* oxbench: the C half of the oxmpi-bench suite (see ../SUITE.md, which is
 * the authority for every test, iteration count and output format).
 *
 * One program, one test per run:
 *
 *     oxbench TEST [-s SIZES] [-q] [-t THREADS]
 *
 * TEST is one of latency latency_anysrc bw bibw msgrate mt_latency
 * vec_latency vec_bw. Rank 0 prints `test,size,value,unit` per size on
 * stdout; diagnostics go to stderr. Exit codes: 1 for usage errors, a wrong
 * rank count or a missing MPI_THREAD_MULTIPLE; 2 for an allocation failure;
 * 3 for a data check failure (via MPI_Abort).
 *
 * Portable MPI + POSIX C11 (getopt, posix_memalign, pthreads). Written for
 * this project; no code from other benchmark suites.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WINDOW 64
#define TAG_DATA 1
#define TAG_ACK 2
#define TAG_ITERS 9 /* reserved for the iteration agreement (C uses MPI_Bcast) */
#define TAG_MT_BASE 100
#define MAX_SIZES 256
#define MAX_THREADS 256
#define GLOBAL_WARM 1000 /* 8-byte ping-pongs before the first latency size */

/* Sizes that do not fit the int counts of the MPI C API are rejected. */
#define MAX_MSG_SIZE ((size_t)1 << 30)

static const size_t DEFAULT_SIZES[] = {0,     1,      4,       8,       16,      64,
                                       256,   1024,   4096,    16384,   65536,
                                       262144, 1048576, 4194304, 16777216};
#define N_DEFAULT_SIZES (sizeof(DEFAULT_SIZES) / sizeof(DEFAULT_SIZES[0]))

enum test {
    T_LATENCY,
    T_LATENCY_ANYSRC,
    T_BW,
    T_BIBW,
    T_MSGRATE,
    T_MT_LATENCY,
    T_VEC_LATENCY,
    T_VEC_BW,
    T_COUNT
};

static const char *const TEST_NAMES[T_COUNT] = {
    "latency", "latency_anysrc", "bw",          "bibw",
    "msgrate", "mt_latency",     "vec_latency", "vec_bw"};

struct options {
    enum test test;
    size_t sizes[MAX_SIZES];
    int nsizes;
    int quick;
    int threads;
};

static int g_rank, g_nranks;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static void emit(const char *test, size_t size, double value, const char *unit) {
    printf("%s,%zu,%.4f,%s\n", test, size, value, unit);
    fflush(stdout);
}

/* Page-aligned, touched buffer (at least one byte). */
static char *alloc_buf(size_t n, int fill) {
    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    if (n == 0) n = 1;
    int rc = posix_memalign(&p, (size_t)page, n);
    if (rc != 0) {
        fprintf(stderr, "oxbench: rank %d: posix_memalign(%zu): %s\n", g_rank, n,
                strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, 2);
        exit(2);
    }
    memset(p, fill, n);
    return p;
}

static void data_check_failed(const char *test, size_t size, int got, int want) {
    fprintf(stderr,
            "oxbench: rank %d: %s: data check failed at size %zu "
            "(got byte 0x%02x, expected 0x%02x)\n",
            g_rank, test, size, got & 0xff, want & 0xff);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

static void check_byte(const char *test, size_t size, const char *p, int want) {
    if (*p != (char)want) data_check_failed(test, size, *p, want);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Iteration agreement: rank 0 turns the warm-up time into an iteration count
 * for a timed loop of about target_s seconds, clamped to [min, dflt], and
 * broadcasts it. */
static int64_t agree_iters(double warm_s, int64_t warm, int64_t min, int64_t dflt,
                           double target_s) {
    int64_t n = dflt;
    if (g_rank == 0 && warm > 0 && warm_s > 0.0) {
        double want = target_s / (warm_s / (double)warm);
        if (want < (double)dflt) n = (int64_t)want;
        n = clamp64(n, min, dflt);
    }
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return n;
}

/* Latency defaults (dflt, warm) by size. */
static void lat_params(size_t size, int quick, int64_t *dflt, int64_t *warm) {
    if (size <= 8192) { *dflt = 20000; *warm = 2000; }
    else if (size <= 65536) { *dflt = 5000; *warm = 500; }
    else if (size <= 1048576) { *dflt = 1000; *warm = 100; }
    else { *dflt = 200; *warm = 20; }
    if (quick) *warm /= 4;
}

/* Bandwidth defaults: about 1 GiB per size, 4..1000 windows. */
static void bw_params(size_t size, int quick, int64_t *dflt, int64_t *warm) {
    int64_t d = 1000;
    if (size > 0) d = clamp64((int64_t)(((int64_t)1 << 30) / ((int64_t)size * WINDOW)), 4, 1000);
    *dflt = d;
    *warm = quick ? d / 40 + 1 : d / 10 + 1;
}

/* ------------------------------------------------------------------------ */
/* Kernels (the timed loops)                                                 */
/* ------------------------------------------------------------------------ */

/* Ping-pong: rank 0 sends then receives, rank 1 mirrors. `src` is either the
 * peer or MPI_ANY_SOURCE. One message is (count, type) from the start of the
 * buffer. */
static void pingpong(int leader, const char *sbuf, char *rbuf, int count,
                     MPI_Datatype type, int peer, int src, int tag, int64_t n) {
    if (leader) {
        for (int64_t i = 0; i < n; i++) {
            MPI_Send(sbuf, count, type, peer, tag, MPI_COMM_WORLD);
            MPI_Recv(rbuf, count, type, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            MPI_Recv(rbuf, count, type, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, count, type, peer, tag, MPI_COMM_WORLD);
        }
    }
}

/* Window sender: WINDOW Isend of the same buffer, Waitall, 4-byte ack. */
static void window_send(const char *sbuf, int count, MPI_Datatype type, int peer,
                        int64_t n) {
    MPI_Request req[WINDOW];
    char ack[4];
    for (int64_t i = 0; i < n; i++) {
        for (int w = 0; w < WINDOW; w++)
            MPI_Isend(sbuf, count, type, peer, TAG_DATA, MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        MPI_Recv(ack, 4, MPI_BYTE, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}

/* Window receiver: WINDOW Irecv into distinct slots (slot w at w * slot
 * bytes), Waitall, 4-byte ack. */
static void window_recv(char *rbuf, size_t slot, int count, MPI_Datatype type,
                        int peer, int64_t n) {
    MPI_Request req[WINDOW];
    char ack[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        for (int w = 0; w < WINDOW; w++)
            MPI_Irecv(rbuf + (size_t)w * slot, count, type, peer, TAG_DATA,
                      MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        MPI_Send(ack, 4, MPI_BYTE, peer, TAG_ACK, MPI_COMM_WORLD);
    }
}

/* Bidirectional window: WINDOW Irecv (distinct slots), WINDOW Isend, Waitall
 * on all of them. */
static void window_bidir(const char *sbuf, char *rbuf, size_t slot, int count,
                         MPI_Datatype type, int peer, int64_t n) {
    MPI_Request req[2 * WINDOW];
    for (int64_t i = 0; i < n; i++) {
        for (int w = 0; w < WINDOW; w++)
            MPI_Irecv(rbuf + (size_t)w * slot, count, type, peer, TAG_DATA,
                      MPI_COMM_WORLD, &req[w]);
        for (int w = 0; w < WINDOW; w++)
            MPI_Isend(sbuf, count, type, peer, TAG_DATA, MPI_COMM_WORLD,
                      &req[WINDOW + w]);
        MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
    }
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

static size_t max_size(const struct options *o) {
    size_t m = 0;
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] > m) m = o->sizes[i];
    return m;
}

/* For the vector tests: one element of vector(size/8, 1, 2, MPI_DOUBLE). */
static MPI_Datatype make_vector(size_t size) {
    MPI_Datatype t;
    MPI_Type_vector((int)(size / 8), 1, 2, MPI_DOUBLE, &t);
    MPI_Type_commit(&t);
    return t;
}

/* The datatype and count of one message of `size` payload bytes: bytes,
 * or one element of the vector type (free it with MPI_Type_free). */
static void message_type(size_t size, int vec, MPI_Datatype *type, int *count) {
    *type = MPI_BYTE;
    *count = (int)size;
    if (vec) {
        *type = make_vector(size);
        *count = 1;
    }
}

/* Offset of the last payload byte of one vector message of `size` payload
 * bytes laid out with stride 2 doubles: the last double starts at
 * (size/8 - 1) * 16. */
static size_t vec_last_byte(size_t size) { return (size / 8 - 1) * 16 + 7; }

/* latency, latency_anysrc, vec_latency */
static void run_latency(const struct options *o) {
    const char *name = TEST_NAMES[o->test];
    int vec = o->test == T_VEC_LATENCY;
    int peer = 1 - g_rank;
    int src = o->test == T_LATENCY_ANYSRC ? MPI_ANY_SOURCE : peer;
    int leader = g_rank == 0;
    size_t bytes = max_size(o) * (vec ? 2 : 1);
    if (bytes < 16) bytes = 16; /* room for the 8-byte global warm-up */
    char *sbuf = alloc_buf(bytes, 'a' + g_rank);
    char *rbuf = alloc_buf(bytes, 0);
    double target = o->quick ? 0.12 : 0.3;

    /* Global warm-up: 1000 8-byte ping-pongs with this test's kernel. */
    {
        MPI_Datatype t = vec ? make_vector(8) : MPI_BYTE;
        MPI_Barrier(MPI_COMM_WORLD);
        pingpong(leader, sbuf, rbuf, vec ? 1 : 8, t, peer, src, TAG_DATA, GLOBAL_WARM);
        if (vec) MPI_Type_free(&t);
    }

    for (int i = 0; i < o->nsizes; i++) {
        size_t size = o->sizes[i];
        MPI_Datatype type;
        int count;
        message_type(size, vec, &type, &count);
        int64_t dflt, warm;
        lat_params(size, o->quick, &dflt, &warm);

        MPI_Barrier(MPI_COMM_WORLD);
        double tw = MPI_Wtime();
        pingpong(leader, sbuf, rbuf, count, type, peer, src, TAG_DATA, warm);
        tw = MPI_Wtime() - tw;
        int64_t iters = agree_iters(tw, warm, 50, dflt, target);

        size_t last = size == 0 ? 0 : (vec ? vec_last_byte(size) : size - 1);
        if (size > 0) rbuf[last] = 0; /* the timed loop must deliver it again */

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        pingpong(leader, sbuf, rbuf, count, type, peer, src, TAG_DATA, iters);
        double t = MPI_Wtime() - t0;

        if (size > 0) check_byte(name, size, rbuf + last, 'a' + peer);
        if (vec) MPI_Type_free(&type);
        if (g_rank == 0) emit(name, size, t * 1e6 / (2.0 * (double)iters), "us");
    }
    free(sbuf);
    free(rbuf);
}

/* bw, vec_bw */
static void run_bw(const struct options *o) {
    const char *name = TEST_NAMES[o->test];
    int vec = o->test == T_VEC_BW;
    int peer = 1 - g_rank;
    size_t span = max_size(o) * (vec ? 2 : 1); /* bytes one message spans */
    char *sbuf = alloc_buf(g_rank == 0 ? span : 1, 'a' + g_rank);
    char *rbuf = alloc_buf(g_rank == 1 ? span * WINDOW : 1, 0);
    double target = o->quick ? 0.12 : 0.3;

    for (int i = 0; i < o->nsizes; i++) {
        size_t size = o->sizes[i];
        size_t slot = size * (vec ? 2 : 1);
        MPI_Datatype type;
        int count;
        message_type(size, vec, &type, &count);
        int64_t dflt, warm;
        bw_params(size, o->quick, &dflt, &warm);

        MPI_Barrier(MPI_COMM_WORLD);
        double tw = MPI_Wtime();
        if (g_rank == 0) window_send(sbuf, count, type, peer, warm);
        else window_recv(rbuf, slot, count, type, peer, warm);
        tw = MPI_Wtime() - tw;
        int64_t iters = agree_iters(tw, warm, 4, dflt, target);

        size_t last = 0;
        if (size > 0) last = (WINDOW - 1) * slot + (vec ? vec_last_byte(size) : size - 1);
        if (g_rank == 1 && size > 0) rbuf[last] = 0;

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (g_rank == 0) window_send(sbuf, count, type, peer, iters);
        else window_recv(rbuf, slot, count, type, peer, iters);
        double t = MPI_Wtime() - t0;

        if (g_rank == 1 && size > 0) check_byte(name, size, rbuf + last, 'a');
        if (vec) MPI_Type_free(&type);
        if (g_rank == 0)
            emit(name, size, (double)size * WINDOW * (double)iters / t / 1e6, "MB/s");
    }
    free(sbuf);
    free(rbuf);
}

static void run_bibw(const struct options *o) {
    const char *name = TEST_NAMES[o->test];
    int peer = 1 - g_rank;
    size_t span = max_size(o);
    char *sbuf = alloc_buf(span, 'a' + g_rank);
    char *rbuf = alloc_buf(span * WINDOW, 0);
    double target = o->quick ? 0.12 : 0.3;

    for (int i = 0; i < o->nsizes; i++) {
        size_t size = o->sizes[i];
        int count = (int)size;
        int64_t dflt, warm;
        bw_params(size, o->quick, &dflt, &warm);

        MPI_Barrier(MPI_COMM_WORLD);
        double tw = MPI_Wtime();
        window_bidir(sbuf, rbuf, size, count, MPI_BYTE, peer, warm);
        tw = MPI_Wtime() - tw;
        int64_t iters = agree_iters(tw, warm, 4, dflt, target);

        size_t last = size > 0 ? (WINDOW - 1) * size + size - 1 : 0;
        if (size > 0) rbuf[last] = 0;

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        window_bidir(sbuf, rbuf, size, count, MPI_BYTE, peer, iters);
        double t = MPI_Wtime() - t0;

        if (size > 0) check_byte(name, size, rbuf + last, 'a' + peer);
        if (g_rank == 0)
            emit(name, size, 2.0 * (double)size * WINDOW * (double)iters / t / 1e6,
                 "MB/s");
    }
    free(sbuf);
    free(rbuf);
}

static void run_msgrate(const struct options *o) {
    const char *name = TEST_NAMES[o->test];
    int pairs = g_nranks / 2;
    int sender = g_rank < pairs;
    int peer = sender ? g_rank + pairs : g_rank - pairs;
    size_t span = max_size(o);
    char *sbuf = alloc_buf(sender ? span : 1, 'a' + g_rank);
    char *rbuf = alloc_buf(sender ? 1 : span * WINDOW, 0);
    int64_t warm = o->quick ? 75 : 300;
    double target = o->quick ? 0.3 : 1.0;

    for (int i = 0; i < o->nsizes; i++) {
        size_t size = o->sizes[i];
        int count = (int)size;

        MPI_Barrier(MPI_COMM_WORLD);
        double tw = MPI_Wtime();
        if (sender) window_send(sbuf, count, MPI_BYTE, peer, warm);
        else window_recv(rbuf, size, count, MPI_BYTE, peer, warm);
        tw = MPI_Wtime() - tw;
        int64_t iters = agree_iters(tw, warm, 100, 20000, target);

        size_t last = size > 0 ? (WINDOW - 1) * size + size - 1 : 0;
        if (!sender && size > 0) rbuf[last] = 0;

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (sender) window_send(sbuf, count, MPI_BYTE, peer, iters);
        else window_recv(rbuf, size, count, MPI_BYTE, peer, iters);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;

        if (!sender && size > 0) check_byte(name, size, rbuf + last, 'a' + peer);
        if (g_rank == 0)
            emit(name, size, (double)pairs * WINDOW * (double)iters / t, "msg/s");
    }
    free(sbuf);
    free(rbuf);
}

/* --- mt_latency ---------------------------------------------------------- */

/* A small reusable thread barrier (pthread_barrier_t is optional in POSIX). */
struct tbarrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count, waiting;
    unsigned long generation;
};

static void tbarrier_init(struct tbarrier *b, int count) {
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->count = count;
    b->waiting = 0;
    b->generation = 0;
}

static void tbarrier_destroy(struct tbarrier *b) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

static void tbarrier_wait(struct tbarrier *b) {
    pthread_mutex_lock(&b->mu);
    unsigned long gen = b->generation;
    if (++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (gen == b->generation) pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
}

struct mt_thread {
    pthread_t tid;
    int index;
    char *sbuf, *rbuf;
    size_t size;
    int64_t iters, warm;
    struct tbarrier *bar;
    double elapsed;
};

static void *mt_body(void *arg) {
    struct mt_thread *th = arg;
    int peer = 1 - g_rank;
    int tag = TAG_MT_BASE + th->index;
    int leader = g_rank == 0;
    int count = (int)th->size;

    pingpong(leader, th->sbuf, th->rbuf, count, MPI_BYTE, peer, peer, tag, th->warm);
    if (th->size > 0) th->rbuf[th->size - 1] = 0;
    tbarrier_wait(th->bar);

    double t0 = MPI_Wtime();
    pingpong(leader, th->sbuf, th->rbuf, count, MPI_BYTE, peer, peer, tag, th->iters);
    th->elapsed = MPI_Wtime() - t0;

    if (th->size > 0)
        check_byte("mt_latency", th->size, th->rbuf + th->size - 1, 'a' + peer);
    return NULL;
}

static void run_mt_latency(const struct options *o) {
    int nt = o->threads;
    int peer = 1 - g_rank;
    size_t bytes = max_size(o);
    if (bytes < 8) bytes = 8;
    struct mt_thread th[MAX_THREADS];
    struct tbarrier bar;
    tbarrier_init(&bar, nt);
    for (int t = 0; t < nt; t++) {
        th[t].index = t;
        th[t].sbuf = alloc_buf(bytes, 'a' + g_rank);
        th[t].rbuf = alloc_buf(bytes, 0);
        th[t].bar = &bar;
    }

    /* Global warm-up on the main thread: 1000 8-byte ping-pongs. */
    MPI_Barrier(MPI_COMM_WORLD);
    pingpong(g_rank == 0, th[0].sbuf, th[0].rbuf, 8, MPI_BYTE, peer, peer, TAG_DATA,
             GLOBAL_WARM);

    for (int i = 0; i < o->nsizes; i++) {
        size_t size = o->sizes[i];
        int64_t iters = size <= 8192 ? (o->quick ? 1000 : 5000) : (o->quick ? 100 : 500);
        MPI_Barrier(MPI_COMM_WORLD); /* main thread only, before the threads */
        for (int t = 0; t < nt; t++) {
            th[t].size = size;
            th[t].iters = iters;
            th[t].warm = iters / 10;
            th[t].elapsed = 0.0;
            int rc = pthread_create(&th[t].tid, NULL, mt_body, &th[t]);
            if (rc != 0) {
                fprintf(stderr, "oxbench: rank %d: pthread_create: %s\n", g_rank,
                        strerror(rc));
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
        for (int t = 0; t < nt; t++) pthread_join(th[t].tid, NULL);
        if (g_rank == 0) {
            double sum = 0.0;
            for (int t = 0; t < nt; t++) sum += th[t].elapsed * 1e6 / (2.0 * (double)iters);
            emit("mt_latency", size, sum / nt, "us");
        }
    }
    for (int t = 0; t < nt; t++) {
        free(th[t].sbuf);
        free(th[t].rbuf);
    }
    tbarrier_destroy(&bar);
}

/* ------------------------------------------------------------------------ */
/* Options and main                                                          */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: oxbench TEST [-s SIZES] [-q] [-t THREADS]\n"
            "  TEST: latency latency_anysrc bw bibw msgrate mt_latency "
            "vec_latency vec_bw\n"
            "  -s SIZES    comma-separated message sizes in bytes (vector tests: "
            "multiples of 8)\n"
            "  -q          quick mode (shorter timed loops and warm-ups)\n"
            "  -t THREADS  threads per rank for mt_latency (default 2)\n");
}

static int parse_sizes(const char *s, struct options *o, char *err, size_t errlen) {
    o->nsizes = 0;
    const char *p = s;
    for (;;) {
        if (*p < '0' || *p > '9') {
            snprintf(err, errlen, "bad size list '%s'", s);
            return -1;
        }
        errno = 0;
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno != 0 || v > MAX_MSG_SIZE) {
            snprintf(err, errlen, "size in '%s' out of range (max %zu)", s,
                     MAX_MSG_SIZE);
            return -1;
        }
        if (o->nsizes == MAX_SIZES) {
            snprintf(err, errlen, "too many sizes (max %d)", MAX_SIZES);
            return -1;
        }
        o->sizes[o->nsizes++] = (size_t)v;
        if (*end == '\0') return 0;
        if (*end != ',') {
            snprintf(err, errlen, "bad size list '%s'", s);
            return -1;
        }
        p = end + 1;
    }
}

/* Returns 0 when the run can go ahead, 1 on a usage error (message in err),
 * 2 when help was asked for. */
static int parse_args(int argc, char **argv, struct options *o, char *err,
                      size_t errlen) {
    memset(o, 0, sizeof *o);
    o->threads = 2;
    if (argc < 2) {
        snprintf(err, errlen, "missing TEST");
        return 1;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) return 2;
    int found = -1;
    for (int i = 0; i < T_COUNT; i++)
        if (strcmp(argv[1], TEST_NAMES[i]) == 0) found = i;
    if (found < 0) {
        snprintf(err, errlen, "unknown test '%s'", argv[1]);
        return 1;
    }
    o->test = (enum test)found;

    /* Options follow TEST: getopt sees argv[1] (TEST) in the program-name slot. */
    const char *sizes_arg = NULL;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt(argc - 1, argv + 1, ":s:qt:h")) != -1) {
        switch (c) {
        case 's': sizes_arg = optarg; break;
        case 'q': o->quick = 1; break;
        case 't': {
            char *end;
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || end == optarg || v < 1 || v > MAX_THREADS) {
                snprintf(err, errlen, "bad thread count '%s' (1..%d)", optarg,
                         MAX_THREADS);
                return 1;
            }
            o->threads = (int)v;
            break;
        }
        case 'h': return 2;
        case ':':
            snprintf(err, errlen, "option -%c needs an argument", optopt);
            return 1;
        default:
            snprintf(err, errlen, "unknown option -%c", optopt);
            return 1;
        }
    }
    if (optind < argc - 1) {
        snprintf(err, errlen, "unexpected argument '%s'", argv[1 + optind]);
        return 1;
    }

    if (sizes_arg) {
        if (parse_sizes(sizes_arg, o, err, errlen) != 0) return 1;
    } else if (o->test == T_MSGRATE) {
        o->sizes[0] = 8;
        o->nsizes = 1;
    } else {
        /* No 0 for the bandwidth and vector tests; the vector tests also skip
         * the default sizes that are not multiples of 8 (1 and 4) and 8. */
        int vec = o->test == T_VEC_LATENCY || o->test == T_VEC_BW;
        int skip0 = vec || o->test == T_BW || o->test == T_BIBW;
        for (size_t i = 0; i < N_DEFAULT_SIZES; i++) {
            size_t s = DEFAULT_SIZES[i];
            if ((skip0 && s == 0) || (vec && (s % 8 != 0 || s < 16))) continue;
            o->sizes[o->nsizes++] = s;
        }
    }
    if (o->test == T_VEC_LATENCY || o->test == T_VEC_BW) {
        for (int i = 0; i < o->nsizes; i++)
            if (o->sizes[i] == 0 || o->sizes[i] % 8 != 0) {
                snprintf(err, errlen,
                         "%s: size %zu is not a positive multiple of 8",
                         TEST_NAMES[o->test], o->sizes[i]);
                return 1;
            }
    }
    return 0;
}

int main(int argc, char **argv) {
    struct options o;
    char err[256] = "";
    int parsed = parse_args(argc, argv, &o, err, sizeof err);

    int provided = MPI_THREAD_SINGLE;
    if (parsed == 0 && o.test == T_MT_LATENCY)
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else
        MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);

    /* Every rank reaches the same verdict; only rank 0 reports it. */
    int code = 0;
    if (parsed == 2) {
        if (g_rank == 0) usage(stdout);
        MPI_Finalize();
        return 0;
    }
    if (parsed == 1) {
        if (g_rank == 0) {
            fprintf(stderr, "oxbench: %s\n", err);
            usage(stderr);
        }
        code = 1;
    } else if (o.test == T_MSGRATE) {
        if (g_nranks < 2 || g_nranks % 2 != 0) {
            if (g_rank == 0)
                fprintf(stderr, "oxbench: msgrate needs an even number of ranks, got %d\n",
                        g_nranks);
            code = 1;
        }
    } else if (g_nranks != 2) {
        if (g_rank == 0)
            fprintf(stderr, "oxbench: %s needs exactly 2 ranks, got %d\n",
                    TEST_NAMES[o.test], g_nranks);
        code = 1;
    } else if (o.test == T_MT_LATENCY && provided < MPI_THREAD_MULTIPLE) {
        if (g_rank == 0)
            fprintf(stderr,
                    "oxbench: mt_latency needs MPI_THREAD_MULTIPLE, the library "
                    "provides level %d\n",
                    provided);
        code = 1;
    }
    if (code != 0) {
        /* Let rank 0's message out before any rank leaves (a launcher may end
         * the job as soon as the first rank exits with an error). */
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return code;
    }

    switch (o.test) {
    case T_LATENCY:
    case T_LATENCY_ANYSRC:
    case T_VEC_LATENCY: run_latency(&o); break;
    case T_BW:
    case T_VEC_BW: run_bw(&o); break;
    case T_BIBW: run_bibw(&o); break;
    case T_MSGRATE: run_msgrate(&o); break;
    case T_MT_LATENCY: run_mt_latency(&o); break;
    case T_COUNT: break;
    }

    MPI_Finalize();
    return 0;
}
