/*
 * coll_algos.c -- every algorithm of the tuned collectives against a serial
 * reference: Allreduce, Reduce (every root), Reduce_scatter_block,
 * Reduce_scatter (uneven and zero counts), Bcast (every root), Allgather
 * and Alltoall, blocking, non-blocking and persistent, in place and not,
 * at counts below and above the rank count and on both sides of every
 * switch point (8 bytes .. 256 KiB), with
 *   - a non-commutative user operation (composition of affine maps
 *     x -> a x + b mod 2^32, which is associative but not commutative): the
 *     result must be x0 o x1 o ... in rank order;
 *   - MPI_SUM on MPI_INT, and a commutative user sum on a resized MPI_INT
 *     of extent 8 (every other int: the holes must stay untouched).
 * Under oxmpi the test harness runs it with each `coll_tuned_*_algorithm`
 * forced (c_programs.rs), at rank counts that are odd and not powers of
 * two. Min ranks: 1.
 */
#include "check.h"

static int rank, size;

typedef struct {
    unsigned a, b;
} affine;

/* inout = in o inout: apply `in` first, then `inout`. */
static void compose(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    affine *x = in, *y = inout;
    for (int i = 0; i < *len; i++) {
        affine r = {y[i].a * x[i].a, y[i].a * x[i].b + y[i].b};
        y[i] = r;
    }
}

static affine elem(int r, int i)
{
    /* No two share a fixed point b / (1 - a): no two commute. */
    affine e = {2u * (unsigned)(r * 31 + i * 7) + 3u, (unsigned)((r * r + 1) * 1000 + i)};
    return e;
}

/* The serial reduction of element i over ranks lo..hi-1 in order. */
static affine ref(int i)
{
    affine acc = elem(0, i);
    for (int r = 1; r < size; r++) {
        affine x = elem(r, i);
        affine t = {x.a * acc.a, x.a * acc.b + x.b};
        acc = t;
    }
    return acc;
}

/* A commutative sum on T_GAP (MPI_SUM on a resized type is not portable). */
static void gapsum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    int *x = in, *y = inout;
    for (int i = 0; i < *len; i++) y[2 * i] += x[2 * i];
}

static MPI_Datatype T_AFF, T_GAP;
static MPI_Op OP_AFF, OP_GAPSUM;

#define MODES 3 /* blocking, non-blocking, persistent */

static void done(int mode, MPI_Request *q)
{
    if (mode == 0)
        return;
    if (mode == 2)
        MPI_Start(q);
    MPI_Wait(q, MPI_STATUS_IGNORE);
    if (mode == 2)
        MPI_Request_free(q);
}

static void noncommutative(int n)
{
    size_t cells = (size_t)(n + 1) * (size_t)size + 1;
    affine *s = malloc(sizeof(affine) * cells);
    affine *r = malloc(sizeof(affine) * cells);
    int *rc = malloc(sizeof(int) * (size_t)size);
    CHECK(s && r && rc, "malloc");
    for (int mode = 0; mode < MODES; mode++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            MPI_Request q = MPI_REQUEST_NULL;
            /* Allreduce */
            for (int i = 0; i < n; i++) (inplace ? r : s)[i] = elem(rank, i);
            const void *sb = inplace ? MPI_IN_PLACE : (void *)s;
            if (mode == 0) MPI_Allreduce(sb, r, n, T_AFF, OP_AFF, MPI_COMM_WORLD);
            if (mode == 1) MPI_Iallreduce(sb, r, n, T_AFF, OP_AFF, MPI_COMM_WORLD, &q);
            if (mode == 2) MPI_Allreduce_init(sb, r, n, T_AFF, OP_AFF, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
            done(mode, &q);
            for (int i = 0; i < n; i++) {
                affine w = ref(i);
                CHECK(r[i].a == w.a && r[i].b == w.b,
                      "allreduce n=%d mode=%d inplace=%d [%d]: (%u,%u) want (%u,%u)", n, mode,
                      inplace, i, r[i].a, r[i].b, w.a, w.b);
            }
            /* Reduce at every root */
            for (int root = 0; root < size; root++) {
                int me_in = inplace && rank == root;
                for (int i = 0; i < n; i++) (me_in ? r : s)[i] = elem(rank, i);
                const void *sb2 = me_in ? MPI_IN_PLACE : (void *)s;
                if (mode == 0) MPI_Reduce(sb2, r, n, T_AFF, OP_AFF, root, MPI_COMM_WORLD);
                if (mode == 1) MPI_Ireduce(sb2, r, n, T_AFF, OP_AFF, root, MPI_COMM_WORLD, &q);
                if (mode == 2) MPI_Reduce_init(sb2, r, n, T_AFF, OP_AFF, root, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
                done(mode, &q);
                if (rank == root)
                    for (int i = 0; i < n; i++) {
                        affine w = ref(i);
                        CHECK(r[i].a == w.a && r[i].b == w.b, "reduce n=%d root=%d mode=%d [%d]",
                              n, root, mode, i);
                    }
            }
            /* Reduce_scatter_block: n per rank */
            for (int i = 0; i < n * size; i++) (inplace ? r : s)[i] = elem(rank, i);
            if (mode == 0) MPI_Reduce_scatter_block(sb, r, n, T_AFF, OP_AFF, MPI_COMM_WORLD);
            if (mode == 1) MPI_Ireduce_scatter_block(sb, r, n, T_AFF, OP_AFF, MPI_COMM_WORLD, &q);
            if (mode == 2) MPI_Reduce_scatter_block_init(sb, r, n, T_AFF, OP_AFF, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
            done(mode, &q);
            for (int i = 0; i < n; i++) {
                affine w = ref(rank * n + i);
                CHECK(r[i].a == w.a && r[i].b == w.b, "reduce_scatter_block n=%d mode=%d [%d]", n,
                      mode, i);
            }
            /* Reduce_scatter: rank k gets (k * n) % (n + 2) (some zero) */
            int total = 0;
            for (int k = 0; k < size; k++) total += rc[k] = (k * n) % (n + 2);
            for (int i = 0; i < total; i++) (inplace ? r : s)[i] = elem(rank, i);
            if (mode == 0) MPI_Reduce_scatter(sb, r, rc, T_AFF, OP_AFF, MPI_COMM_WORLD);
            if (mode == 1) MPI_Ireduce_scatter(sb, r, rc, T_AFF, OP_AFF, MPI_COMM_WORLD, &q);
            if (mode == 2) MPI_Reduce_scatter_init(sb, r, rc, T_AFF, OP_AFF, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
            done(mode, &q);
            int off = 0;
            for (int k = 0; k < rank; k++) off += rc[k];
            for (int i = 0; i < rc[rank]; i++) {
                affine w = ref(off + i);
                CHECK(r[i].a == w.a && r[i].b == w.b, "reduce_scatter n=%d mode=%d [%d]", n,
                      mode, i);
            }
        }
    }
    free(s);
    free(r);
    free(rc);
}

/* Integers summed by `sum` on `dt` (MPI_SUM on MPI_INT, or OP_GAPSUM on
 * T_GAP: one int of every two). */
static void commutative(int n, MPI_Datatype dt, int stride, MPI_Op sum)
{
    size_t cells = (size_t)n * (size_t)size * (size_t)stride + 1;
    int *s = malloc(sizeof(int) * cells), *r = malloc(sizeof(int) * cells);
    CHECK(s && r, "malloc");
    const int HOLE = -7;
    int sum_r = size * (size - 1) / 2;
#define AT(p, i) ((p)[(size_t)(i) * (size_t)stride])
#define RESET(p, cnt, val)                                                        \
    do {                                                                          \
        for (size_t c_ = 0; c_ < cells; c_++) (p)[c_] = HOLE;                     \
        for (int i_ = 0; i_ < (cnt); i_++) AT(p, i_) = (val);                     \
    } while (0)
#define HOLES(p, cnt)                                                             \
    do {                                                                          \
        if (stride > 1)                                                           \
            for (int i_ = 0; i_ < (cnt); i_++)                                    \
                CHECK((p)[(size_t)i_ * 2 + 1] == HOLE, "hole %d written", i_);  \
    } while (0)
    for (int mode = 0; mode < MODES; mode++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            MPI_Request q = MPI_REQUEST_NULL;
            const void *sb = inplace ? MPI_IN_PLACE : (void *)s;
            /* Allreduce: element i = sum over ranks of (rank + i) */
            RESET(inplace ? r : s, n, 0);
            for (int i = 0; i < n; i++) AT(inplace ? r : s, i) = rank + i;
            if (!inplace) RESET(r, 0, 0);
            if (mode == 0) MPI_Allreduce(sb, r, n, dt, sum, MPI_COMM_WORLD);
            if (mode == 1) MPI_Iallreduce(sb, r, n, dt, sum, MPI_COMM_WORLD, &q);
            if (mode == 2) MPI_Allreduce_init(sb, r, n, dt, sum, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
            done(mode, &q);
            for (int i = 0; i < n; i++)
                CHECK(AT(r, i) == sum_r + size * i, "allreduce sum n=%d mode=%d [%d] = %d", n,
                      mode, i, AT(r, i));
            HOLES(r, n);
            /* Reduce to every root */
            for (int root = 0; root < size; root++) {
                int me_in = inplace && rank == root;
                RESET(me_in ? r : s, n, 0);
                for (int i = 0; i < n; i++) AT(me_in ? r : s, i) = rank + i;
                if (!me_in) RESET(r, 0, 0);
                const void *sb2 = me_in ? MPI_IN_PLACE : (void *)s;
                if (mode == 0) MPI_Reduce(sb2, r, n, dt, sum, root, MPI_COMM_WORLD);
                if (mode == 1) MPI_Ireduce(sb2, r, n, dt, sum, root, MPI_COMM_WORLD, &q);
                if (mode == 2) MPI_Reduce_init(sb2, r, n, dt, sum, root, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
                done(mode, &q);
                if (rank == root) {
                    for (int i = 0; i < n; i++)
                        CHECK(AT(r, i) == sum_r + size * i, "reduce sum n=%d root=%d mode=%d [%d]",
                              n, root, mode, i);
                    HOLES(r, n);
                }
            }
            /* Bcast from every root */
            for (int root = 0; root < size; root++) {
                RESET(r, n, rank == root ? 0 : -1);
                if (rank == root)
                    for (int i = 0; i < n; i++) AT(r, i) = root * 100000 + i;
                if (mode == 0) MPI_Bcast(r, n, dt, root, MPI_COMM_WORLD);
                if (mode == 1) MPI_Ibcast(r, n, dt, root, MPI_COMM_WORLD, &q);
                if (mode == 2) MPI_Bcast_init(r, n, dt, root, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
                done(mode, &q);
                for (int i = 0; i < n; i++)
                    CHECK(AT(r, i) == root * 100000 + i, "bcast n=%d root=%d mode=%d [%d] = %d", n,
                          root, mode, i, AT(r, i));
                HOLES(r, n);
            }
            /* Reduce_scatter_block */
            RESET(inplace ? r : s, n * size, 0);
            for (int i = 0; i < n * size; i++) AT(inplace ? r : s, i) = rank + i;
            if (!inplace) RESET(r, 0, 0);
            if (mode == 0) MPI_Reduce_scatter_block(sb, r, n, dt, sum, MPI_COMM_WORLD);
            if (mode == 1) MPI_Ireduce_scatter_block(sb, r, n, dt, sum, MPI_COMM_WORLD, &q);
            if (mode == 2) MPI_Reduce_scatter_block_init(sb, r, n, dt, sum, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
            done(mode, &q);
            for (int i = 0; i < n; i++)
                CHECK(AT(r, i) == sum_r + size * (rank * n + i), "rsb sum n=%d mode=%d [%d]", n,
                      mode, i);
            HOLES(r, n);
            /* Allgather: block k from rank k */
            RESET(r, n * size, -1);
            RESET(s, n, 0);
            for (int i = 0; i < n; i++) AT(inplace ? r : s, rank * n * inplace + i) = rank * 1000 + i;
            if (mode == 0) MPI_Allgather(sb, n, dt, r, n, dt, MPI_COMM_WORLD);
            if (mode == 1) MPI_Iallgather(sb, n, dt, r, n, dt, MPI_COMM_WORLD, &q);
            if (mode == 2) MPI_Allgather_init(sb, n, dt, r, n, dt, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
            done(mode, &q);
            for (int k = 0; k < size; k++)
                for (int i = 0; i < n; i++)
                    CHECK(AT(r, k * n + i) == k * 1000 + i, "allgather n=%d mode=%d block %d [%d]",
                          n, mode, k, i);
            HOLES(r, n * size);
            /* Alltoall: block k of rank j's send buffer goes to rank k */
            RESET(r, n * size, -1);
            RESET(s, n * size, 0);
            for (int k = 0; k < size; k++)
                for (int i = 0; i < n; i++) AT(inplace ? r : s, k * n + i) = rank * 1000 + k * 10 + i;
            if (mode == 0) MPI_Alltoall(sb, n, dt, r, n, dt, MPI_COMM_WORLD);
            if (mode == 1) MPI_Ialltoall(sb, n, dt, r, n, dt, MPI_COMM_WORLD, &q);
            if (mode == 2) MPI_Alltoall_init(sb, n, dt, r, n, dt, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
            done(mode, &q);
            for (int k = 0; k < size; k++)
                for (int i = 0; i < n; i++)
                    CHECK(AT(r, k * n + i) == k * 1000 + rank * 10 + i,
                          "alltoall n=%d mode=%d block %d [%d]", n, mode, k, i);
            HOLES(r, n * size);
        }
    }
    free(s);
    free(r);
#undef AT
#undef RESET
#undef HOLES
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Type_contiguous(2, MPI_UNSIGNED, &T_AFF);
    MPI_Type_commit(&T_AFF);
    MPI_Type_create_resized(MPI_INT, 0, 2 * (MPI_Aint)sizeof(int), &T_GAP);
    MPI_Type_commit(&T_GAP);
    MPI_Op_create(compose, 0, &OP_AFF);
    MPI_Op_create(gapsum, 1, &OP_GAPSUM);
    int commute = 1;
    MPI_Op_commutative(OP_AFF, &commute);
    CHECK(commute == 0, "the affine composition is not commutative");

    /* Counts below and above the rank count, and across 8 B .. 256 KiB. */
    static const int NS[] = {1, 3, 8, 13, 1000, 32768};
    for (size_t k = 0; k < sizeof NS / sizeof NS[0]; k++) {
        int n = NS[k];
        if (n <= 1000) noncommutative(n);
        commutative(n, MPI_INT, 1, MPI_SUM);
        if (n <= 1000) commutative(n, T_GAP, 2, OP_GAPSUM);
    }
    MPI_Op_free(&OP_AFF);
    MPI_Op_free(&OP_GAPSUM);
    MPI_Type_free(&T_AFF);
    MPI_Type_free(&T_GAP);
    if (rank == 0) printf("ok: coll_algos\n");
    MPI_Finalize();
    return 0;
}
