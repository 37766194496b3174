/*
 * stencil.c -- a 2-D Jacobi mini-app: a grid distributed over a 2-D grid of
 * ranks, halos exchanged every iteration, the result checked point by
 * point against the same computation done serially on rank 0.
 *
 *   stencil [NX NY ITERS]      (default 120 x 90 interior points, 200 iterations)
 *
 * The (NX+2) x (NY+2) grid has a fixed boundary ring (Dirichlet values of a
 * fixed function) and an interior starting at 0. Each iteration replaces
 * every interior point by the mean of its four neighbours. Ranks form a
 * PX x PY grid (PX the largest divisor of the size not above its square
 * root; row-major coordinates), each owning a block of rows and columns
 * with a one-point halo. Halos go with MPI_Isend/MPI_Irecv/MPI_Waitall, a
 * column through an MPI_Type_vector on even iterations and through
 * MPI_Pack/MPI_Unpack into MPI_PACKED buffers on odd ones; rows are
 * contiguous. Every 10 iterations an MPI_Allreduce sums the squared
 * change, compared with the serial run's. At the end each rank sends its
 * block (a vector type) and rank 0 receives it straight into the global
 * grid through an MPI_Type_create_subarray, then compares every point with
 * its serial run: equal bit for bit (both do the same operations in the
 * same order). A plain MPI C program: it runs under any MPI, any number of
 * ranks up to NX * NY.
 *
 * Success: rank 0 prints "ok: stencil NXxNY on PXxPY ranks, ITERS
 * iterations, residual R"; a failed check prints "FAIL stencil: ..." and
 * aborts.
 */
#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void fail(const char *what)
{
    fprintf(stderr, "FAIL stencil: %s (rank %d)\n", what, rank);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define MPI_OK(call)                  \
    do {                              \
        if ((call) != MPI_SUCCESS)    \
            fail(#call);              \
    } while (0)

/* The boundary values. */
static double boundary(int x, int y, int nx, int ny)
{
    return 1.0 + 0.5 * x / (nx + 1) - 0.25 * y / (ny + 1) + 0.125 * ((x * 7 + y * 3) % 5);
}

/* Rows [lo, hi) of n split in p parts, part k. */
static void split(int n, int p, int k, int *lo, int *cnt)
{
    int base = n / p, extra = n % p;
    *cnt = base + (k < extra);
    *lo = k * base + (k < extra ? k : extra);
}

/* One Jacobi sweep of the interior of an (r+2) x (c+2) array; returns the
 * sum of the squared changes. */
static double sweep(const double *u, double *v, int r, int c)
{
    int w = c + 2;
    double s = 0.0;
    for (int i = 1; i <= r; i++)
        for (int j = 1; j <= c; j++) {
            double x = 0.25 * (u[(i - 1) * w + j] + u[(i + 1) * w + j] + u[i * w + j - 1] +
                               u[i * w + j + 1]);
            double d = x - u[i * w + j];
            s += d * d;
            v[i * w + j] = x;
        }
    return s;
}

/* The initial global (nx+2) x (ny+2) grid. */
static double *initial(int nx, int ny)
{
    double *g = calloc((size_t)(nx + 2) * (ny + 2), sizeof(double));
    if (g == NULL)
        fail("out of memory");
    for (int x = 0; x < nx + 2; x++)
        for (int y = 0; y < ny + 2; y++)
            if (x == 0 || y == 0 || x == nx + 1 || y == ny + 1)
                g[x * (ny + 2) + y] = boundary(x, y, nx, ny);
    return g;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int nx = argc > 3 ? atoi(argv[1]) : 120, ny = argc > 3 ? atoi(argv[2]) : 90;
    int iters = argc > 3 ? atoi(argv[3]) : 200;
    int px = 1;
    for (int d = 1; d * d <= size; d++)
        if (size % d == 0)
            px = d;
    int py = size / px;
    if (nx < px || ny < py || iters < 1)
        fail("grid too small for the ranks, or no iterations");
    int rx = rank / py, ry = rank % py;
    int r0, nr, c0, nc;
    split(nx, px, rx, &r0, &nr);
    split(ny, py, ry, &c0, &nc);
    int w = nc + 2;
    int up = rx > 0 ? rank - py : MPI_PROC_NULL, down = rx < px - 1 ? rank + py : MPI_PROC_NULL;
    int left = ry > 0 ? rank - 1 : MPI_PROC_NULL, right = ry < py - 1 ? rank + 1 : MPI_PROC_NULL;

    /* The local block with its halo, from the global initial grid. */
    double *g0 = initial(nx, ny);
    double *u = malloc(sizeof(double) * (nr + 2) * w), *v = malloc(sizeof(double) * (nr + 2) * w);
    if (u == NULL || v == NULL)
        fail("out of memory");
    for (int i = 0; i < nr + 2; i++)
        for (int j = 0; j < w; j++)
            u[i * w + j] = g0[(r0 + i) * (ny + 2) + c0 + j];
    memcpy(v, u, sizeof(double) * (nr + 2) * w);

    MPI_Datatype column;
    MPI_OK(MPI_Type_vector(nr, 1, w, MPI_DOUBLE, &column));
    MPI_OK(MPI_Type_commit(&column));
    int packsize;
    MPI_OK(MPI_Pack_size(nr, MPI_DOUBLE, MPI_COMM_WORLD, &packsize));
    char *pk[4];
    for (int k = 0; k < 4; k++)
        if ((pk[k] = malloc(packsize)) == NULL)
            fail("out of memory");

    double residuals[64];
    int nres = 0;
    for (int it = 0; it < iters; it++) {
        MPI_Request rq[8];
        int tag = it % 2;
        /* Rows: contiguous. Send the first/last interior row, receive the halo rows. */
        MPI_OK(MPI_Irecv(&u[0 * w + 1], nc, MPI_DOUBLE, up, tag, MPI_COMM_WORLD, &rq[0]));
        MPI_OK(MPI_Irecv(&u[(nr + 1) * w + 1], nc, MPI_DOUBLE, down, tag, MPI_COMM_WORLD, &rq[1]));
        MPI_OK(MPI_Isend(&u[1 * w + 1], nc, MPI_DOUBLE, up, tag, MPI_COMM_WORLD, &rq[2]));
        MPI_OK(MPI_Isend(&u[nr * w + 1], nc, MPI_DOUBLE, down, tag, MPI_COMM_WORLD, &rq[3]));
        if (it % 2 == 0) {
            /* Columns through the vector type. */
            MPI_OK(MPI_Irecv(&u[1 * w + 0], 1, column, left, tag, MPI_COMM_WORLD, &rq[4]));
            MPI_OK(MPI_Irecv(&u[1 * w + nc + 1], 1, column, right, tag, MPI_COMM_WORLD, &rq[5]));
            MPI_OK(MPI_Isend(&u[1 * w + 1], 1, column, left, tag, MPI_COMM_WORLD, &rq[6]));
            MPI_OK(MPI_Isend(&u[1 * w + nc], 1, column, right, tag, MPI_COMM_WORLD, &rq[7]));
            MPI_OK(MPI_Waitall(8, rq, MPI_STATUSES_IGNORE));
        } else {
            /* Columns packed. */
            int p0 = 0, p1 = 0;
            MPI_OK(MPI_Pack(&u[1 * w + 1], 1, column, pk[2], packsize, &p0, MPI_COMM_WORLD));
            MPI_OK(MPI_Pack(&u[1 * w + nc], 1, column, pk[3], packsize, &p1, MPI_COMM_WORLD));
            MPI_OK(MPI_Irecv(pk[0], packsize, MPI_PACKED, left, tag, MPI_COMM_WORLD, &rq[4]));
            MPI_OK(MPI_Irecv(pk[1], packsize, MPI_PACKED, right, tag, MPI_COMM_WORLD, &rq[5]));
            MPI_OK(MPI_Isend(pk[2], p0, MPI_PACKED, left, tag, MPI_COMM_WORLD, &rq[6]));
            MPI_OK(MPI_Isend(pk[3], p1, MPI_PACKED, right, tag, MPI_COMM_WORLD, &rq[7]));
            MPI_OK(MPI_Waitall(8, rq, MPI_STATUSES_IGNORE));
            int q = 0;
            if (left != MPI_PROC_NULL)
                MPI_OK(MPI_Unpack(pk[0], packsize, &q, &u[1 * w + 0], 1, column, MPI_COMM_WORLD));
            q = 0;
            if (right != MPI_PROC_NULL)
                MPI_OK(MPI_Unpack(pk[1], packsize, &q, &u[1 * w + nc + 1], 1, column,
                                  MPI_COMM_WORLD));
        }
        double local = sweep(u, v, nr, nc), total = 0.0;
        double *t = u;
        u = v;
        v = t;
        if ((it + 1) % 10 == 0 && nres < 64) {
            MPI_OK(MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
            residuals[nres++] = total;
        }
    }

    /* Gather: each block as a vector of its interior rows; rank 0 receives
     * each into the global grid through a subarray type. */
    MPI_Datatype block;
    MPI_OK(MPI_Type_vector(nr, nc, w, MPI_DOUBLE, &block));
    MPI_OK(MPI_Type_commit(&block));
    MPI_Request srq;
    MPI_OK(MPI_Isend(&u[1 * w + 1], 1, block, 0, 99, MPI_COMM_WORLD, &srq));
    if (rank == 0) {
        double *g = initial(nx, ny);
        for (int p = 0; p < size; p++) {
            int pr0, pnr, pc0, pnc;
            split(nx, px, p / py, &pr0, &pnr);
            split(ny, py, p % py, &pc0, &pnc);
            int sizes[2] = {nx + 2, ny + 2}, sub[2] = {pnr, pnc}, start[2] = {pr0 + 1, pc0 + 1};
            MPI_Datatype sa;
            MPI_OK(MPI_Type_create_subarray(2, sizes, sub, start, MPI_ORDER_C, MPI_DOUBLE, &sa));
            MPI_OK(MPI_Type_commit(&sa));
            MPI_Status st;
            MPI_OK(MPI_Recv(g, 1, sa, p, 99, MPI_COMM_WORLD, &st));
            int n;
            MPI_OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
            if (n != pnr * pnc)
                fail("a block arrived with the wrong count");
            MPI_OK(MPI_Type_free(&sa));
        }
        /* The serial run. */
        double *s = initial(nx, ny), *s2 = initial(nx, ny);
        int k = 0;
        for (int it = 0; it < iters; it++) {
            double r = sweep(s, s2, nx, ny);
            double *t = s;
            s = s2;
            s2 = t;
            if ((it + 1) % 10 == 0 && k < nres) {
                double d = fabs(r - residuals[k]);
                if (d > 1e-12 * (fabs(r) + 1e-300))
                    fail("a residual differs from the serial run's");
                k++;
            }
        }
        for (int x = 0; x < nx + 2; x++)
            for (int y = 0; y < ny + 2; y++)
                if (g[x * (ny + 2) + y] != s[x * (ny + 2) + y]) {
                    fprintf(stderr, "FAIL stencil: point (%d, %d) is %.17g, serial %.17g\n", x, y,
                            g[x * (ny + 2) + y], s[x * (ny + 2) + y]);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
        printf("ok: stencil %dx%d on %dx%d ranks, %d iterations, residual %.3e\n", nx, ny, px, py,
               iters, nres ? residuals[nres - 1] : 0.0);
        fflush(stdout);
        free(g);
        free(s);
        free(s2);
    }
    MPI_OK(MPI_Wait(&srq, MPI_STATUS_IGNORE));
    MPI_OK(MPI_Type_free(&block));
    MPI_OK(MPI_Type_free(&column));
    for (int k = 0; k < 4; k++)
        free(pk[k]);
    free(u);
    free(v);
    free(g0);
    MPI_Finalize();
    return 0;
}
