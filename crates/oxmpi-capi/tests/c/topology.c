/*
 * topology.c -- process topologies: Cartesian, graph, distributed graph.
 *
 * Ranks: any number from 1 to 8.
 *
 * Checks:
 *  - Dims_create: balanced, non-increasing factorisations for nnodes 1..64
 *    over 1..4 dimensions (product, order, and no factorisation with a
 *    smaller largest factor exists), fixed entries kept, and a table of
 *    known results (12 -> 4x3, 16 -> 4x2x2, 36 -> 4x3x3, 7 -> 7x1, ...);
 *    MPI_ERR_DIMS when nnodes is not a multiple of the fixed entries.
 *  - Cart_create of a Dims_create grid over all ranks (2-D, periodic in
 *    the first dimension only) and of a 1-D grid of size - 1 ranks (the
 *    last rank gets MPI_COMM_NULL); Topo_test MPI_CART, Cartdim_get,
 *    Cart_get (dims, periods, own coordinates), Cart_coords/Cart_rank
 *    round trips for every rank, Cart_rank wrapping a periodic coordinate;
 *    Cart_shift in both dimensions (MPI_PROC_NULL at the non-periodic
 *    edges, wrapped neighbours in the periodic one), and a halo exchange
 *    with the shifted ranks that delivers each neighbour's rank; Cart_map
 *    (own rank or MPI_UNDEFINED); Cart_sub keeping each dimension in
 *    turn: sizes and coordinates; Comm_dup keeps the topology; Comm_split
 *    does not (MPI_UNDEFINED).
 *  - Graph_create of a ring with a chord (node 0 also linked to the
 *    middle node): Topo_test MPI_GRAPH, Graphdims_get, Graph_get,
 *    Graph_neighbors_count / Graph_neighbors of every node, messages to
 *    every neighbour arrive; Graph_map.
 *  - Dist_graph_create_adjacent (ring: source left, destination right,
 *    weighted) and Dist_graph_create (every rank names the edge from its
 *    left neighbour to itself and from itself to its right neighbour,
 *    unweighted, so each edge is given twice): Topo_test MPI_DIST_GRAPH,
 *    Dist_graph_neighbors_count / Dist_graph_neighbors (as multisets).
 *  - Errors (MPI_ERRORS_RETURN): Cart_coords on a communicator without a
 *    topology is MPI_ERR_TOPOLOGY; Cart_create of more ranks than the
 *    communicator has is an error; strict mode: Cart_shift with direction
 *    ndims is MPI_ERR_ARG (Open MPI 5 does not check it).
 */
#include "check.h"

static int rank, size;

static void dims(void)
{
    struct {
        int n, nd;
        int want[4];
    } known[] = {
        {12, 2, {4, 3}}, {16, 3, {4, 2, 2}}, {36, 3, {4, 3, 3}}, {7, 2, {7, 1}},
        {24, 3, {4, 3, 2}}, {64, 3, {4, 4, 4}}, {1, 3, {1, 1, 1}}, {6, 2, {3, 2}},
        {30, 3, {5, 3, 2}}, {60, 2, {10, 6}}, {2, 3, {2, 1, 1}}, {48, 4, {4, 3, 2, 2}},
        {360, 3, {10, 6, 6}}, {20, 4, {5, 2, 2, 1}},
    };
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        int d[4] = {0, 0, 0, 0};
        MPI_CHECK(MPI_Dims_create(known[k].n, known[k].nd, d));
        for (int i = 0; i < known[k].nd; i++)
            CHECK(d[i] == known[k].want[i], "Dims_create(%d, %d)[%d] = %d, expected %d", known[k].n,
                  known[k].nd, i, d[i], known[k].want[i]);
    }
    for (int n = 1; n <= 64; n++) {
        for (int nd = 1; nd <= 4; nd++) {
            int d[4] = {0, 0, 0, 0};
            MPI_CHECK(MPI_Dims_create(n, nd, d));
            int p = 1;
            for (int i = 0; i < nd; i++) {
                p *= d[i];
                CHECK(i == 0 || d[i] <= d[i - 1], "Dims_create(%d, %d) not non-increasing", n, nd);
            }
            CHECK(p == n, "Dims_create(%d, %d): product %d", n, nd, p);
            /* No factorisation into nd factors has a smaller largest one:
               the smallest possible largest factor is the least f >= the
               nd-th root such that n has a divisor chain below it. Check
               the weaker, exact property for two dimensions. */
            if (nd == 2) {
                for (int f = d[0] - 1; f * f >= n && f >= 1; f--)
                    CHECK(n % f != 0 || n / f > f, "Dims_create(%d, 2) = %dx%d but %dx%d exists", n,
                          d[0], d[1], f, n / f);
            }
        }
    }
    int d[3] = {0, 3, 0};
    MPI_CHECK(MPI_Dims_create(12, 3, d));
    CHECK(d[1] == 3 && d[0] * d[2] == 4 && d[0] >= d[2], "fixed entry: %d %d %d", d[0], d[1], d[2]);
    int bad[2] = {5, 0};
    CHECK_CLASS(MPI_Dims_create(12, 2, bad), MPI_ERR_DIMS);
}

static void cart(void)
{
    int d[2] = {0, 0}, periods[2] = {1, 0};
    MPI_CHECK(MPI_Dims_create(size, 2, d));
    MPI_Comm c;
    MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 2, d, periods, 0, &c));
    CHECK(c != MPI_COMM_NULL, "Cart_create gave MPI_COMM_NULL to a member");
    int t = -1, nd = -1;
    MPI_CHECK(MPI_Topo_test(c, &t));
    CHECK(t == MPI_CART, "Topo_test = %d", t);
    MPI_CHECK(MPI_Cartdim_get(c, &nd));
    CHECK(nd == 2, "Cartdim_get = %d", nd);
    int gd[2], gp[2], gc[2], r;
    MPI_CHECK(MPI_Comm_rank(c, &r));
    MPI_CHECK(MPI_Cart_get(c, 2, gd, gp, gc));
    CHECK(gd[0] == d[0] && gd[1] == d[1] && gp[0] == 1 && gp[1] == 0, "Cart_get dims/periods");
    CHECK(gc[0] == r / d[1] && gc[1] == r % d[1], "Cart_get coords (%d,%d) of rank %d", gc[0], gc[1], r);
    for (int q = 0; q < size; q++) {
        int co[2], back = -1;
        MPI_CHECK(MPI_Cart_coords(c, q, 2, co));
        CHECK(co[0] == q / d[1] && co[1] == q % d[1], "Cart_coords of %d", q);
        MPI_CHECK(MPI_Cart_rank(c, co, &back));
        CHECK(back == q, "Cart_rank(Cart_coords(%d)) = %d", q, back);
    }
    {
        int co[2] = {gc[0] + d[0], gc[1]}, w = -1;
        MPI_CHECK(MPI_Cart_rank(c, co, &w));
        CHECK(w == r, "Cart_rank does not wrap the periodic dimension: %d", w);
    }
    /* Shifts and a halo exchange. */
    for (int dir = 0; dir < 2; dir++) {
        int src, dst;
        MPI_CHECK(MPI_Cart_shift(c, dir, 1, &src, &dst));
        int co[2] = {gc[0], gc[1]};
        if (dir == 0) {
            int e[2] = {(gc[0] + 1) % d[0], gc[1]}, s[2] = {(gc[0] - 1 + d[0]) % d[0], gc[1]};
            int er, sr;
            MPI_CHECK(MPI_Cart_rank(c, e, &er));
            MPI_CHECK(MPI_Cart_rank(c, s, &sr));
            CHECK(dst == er && src == sr, "periodic shift: %d %d, expected %d %d", src, dst, sr, er);
        } else {
            int want_dst = gc[1] + 1 < d[1] ? r + 1 : MPI_PROC_NULL;
            int want_src = gc[1] > 0 ? r - 1 : MPI_PROC_NULL;
            CHECK(dst == want_dst && src == want_src, "non-periodic shift: %d %d, expected %d %d", src,
                  dst, want_src, want_dst);
        }
        (void)co;
        int got = -2;
        MPI_Status st;
        MPI_CHECK(MPI_Sendrecv(&r, 1, MPI_INT, dst, 30 + dir, &got, 1, MPI_INT, src, 30 + dir, c, &st));
        if (src != MPI_PROC_NULL)
            CHECK(got == src, "halo from %d carried %d", src, got);
        else
            CHECK(got == -2, "a receive from MPI_PROC_NULL changed the buffer");
    }
    {
        int src, dst;
        MPI_CHECK(MPI_Cart_shift(c, 1, -1, &src, &dst));
        CHECK(dst == (gc[1] > 0 ? r - 1 : MPI_PROC_NULL), "negative shift");
        MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        if (strict_mode())
            CHECK_CLASS(MPI_Cart_shift(c, 2, 1, &src, &dst), MPI_ERR_ARG);
    }
    int nr = -1;
    MPI_CHECK(MPI_Cart_map(MPI_COMM_WORLD, 2, d, periods, &nr));
    CHECK(nr == rank, "Cart_map gave %d", nr);
    /* Sub-grids. */
    for (int keep = 0; keep < 2; keep++) {
        int remain[2] = {keep == 0, keep == 1};
        MPI_Comm s;
        MPI_CHECK(MPI_Cart_sub(c, remain, &s));
        int n, sr, snd = -1, sd[1], sp[1], sc[1];
        MPI_CHECK(MPI_Comm_size(s, &n));
        MPI_CHECK(MPI_Comm_rank(s, &sr));
        CHECK(n == d[keep] && sr == gc[keep], "Cart_sub keeping %d: size %d rank %d", keep, n, sr);
        MPI_CHECK(MPI_Cartdim_get(s, &snd));
        CHECK(snd == 1, "Cart_sub dims %d", snd);
        MPI_CHECK(MPI_Cart_get(s, 1, sd, sp, sc));
        CHECK(sd[0] == d[keep] && sp[0] == periods[keep] && sc[0] == gc[keep], "Cart_sub Cart_get");
        int sum = 0;
        MPI_CHECK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, s));
        MPI_CHECK(MPI_Comm_free(&s));
    }
    MPI_Comm dd, sp;
    MPI_CHECK(MPI_Comm_dup(c, &dd));
    MPI_CHECK(MPI_Topo_test(dd, &t));
    CHECK(t == MPI_CART, "Comm_dup lost the topology: %d", t);
    MPI_CHECK(MPI_Comm_free(&dd));
    MPI_CHECK(MPI_Comm_split(c, 0, 0, &sp));
    MPI_CHECK(MPI_Topo_test(sp, &t));
    CHECK(t == MPI_UNDEFINED, "Comm_split kept a topology: %d", t);
    MPI_CHECK(MPI_Comm_free(&sp));
    MPI_CHECK(MPI_Comm_free(&c));

    /* A 1-D grid of size - 1: the last rank is left out. */
    if (size > 1) {
        int n1 = size - 1, p1 = 0;
        MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 1, &n1, &p1, 1, &c));
        if (rank == size - 1) {
            CHECK(c == MPI_COMM_NULL, "the rank beyond the grid got a communicator");
        } else {
            int n;
            MPI_CHECK(MPI_Comm_size(c, &n));
            CHECK(n == n1, "1-D grid size %d", n);
            MPI_CHECK(MPI_Comm_free(&c));
        }
    }
    int toomany = size + 1, p0 = 0;
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, 1, &toomany, &p0, 0, &c) != MPI_SUCCESS,
          "Cart_create of more ranks than the communicator has succeeded");
}

static void graph(void)
{
    /* A ring, and node 0 linked to node size/2 as well (both ways). */
    int index[8], edges[32], ne = 0;
    int mid = size / 2;
    for (int v = 0; v < size; v++) {
        if (size > 1) {
            edges[ne++] = (v + 1) % size;
            if (size > 2)
                edges[ne++] = (v + size - 1) % size;
        }
        if (size > 3 && (v == 0 || v == mid))
            edges[ne++] = v == 0 ? mid : 0;
        index[v] = ne;
    }
    MPI_Comm g;
    MPI_CHECK(MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g));
    int t, nn, nedges;
    MPI_CHECK(MPI_Topo_test(g, &t));
    CHECK(t == MPI_GRAPH, "Topo_test = %d", t);
    MPI_CHECK(MPI_Graphdims_get(g, &nn, &nedges));
    CHECK(nn == size && nedges == ne, "Graphdims_get %d %d", nn, nedges);
    int gi[8], ge[32];
    MPI_CHECK(MPI_Graph_get(g, 8, 32, gi, ge));
    for (int i = 0; i < size; i++)
        CHECK(gi[i] == index[i], "Graph_get index[%d]", i);
    for (int i = 0; i < ne; i++)
        CHECK(ge[i] == edges[i], "Graph_get edges[%d]", i);
    for (int v = 0; v < size; v++) {
        int cnt, nb[8];
        MPI_CHECK(MPI_Graph_neighbors_count(g, v, &cnt));
        int lo = v ? index[v - 1] : 0;
        CHECK(cnt == index[v] - lo, "Graph_neighbors_count(%d) = %d", v, cnt);
        MPI_CHECK(MPI_Graph_neighbors(g, v, 8, nb));
        for (int i = 0; i < cnt; i++)
            CHECK(nb[i] == edges[lo + i], "Graph_neighbors(%d)[%d]", v, i);
    }
    /* A message to every neighbour (edges are symmetric). */
    int cnt, nb[8], in[8];
    MPI_Request q[16];
    MPI_CHECK(MPI_Graph_neighbors_count(g, rank, &cnt));
    MPI_CHECK(MPI_Graph_neighbors(g, rank, 8, nb));
    for (int i = 0; i < cnt; i++)
        MPI_CHECK(MPI_Irecv(&in[i], 1, MPI_INT, nb[i], 40 + i, g, &q[i]));
    for (int i = 0; i < cnt; i++) {
        /* My position in the neighbour's list picks the tag. */
        int c2, nb2[8], pos = -1;
        MPI_CHECK(MPI_Graph_neighbors_count(g, nb[i], &c2));
        MPI_CHECK(MPI_Graph_neighbors(g, nb[i], 8, nb2));
        for (int k = 0; k < c2; k++)
            if (nb2[k] == rank && pos < 0)
                pos = k;
        CHECK(pos >= 0, "edge %d-%d not symmetric", rank, nb[i]);
        MPI_CHECK(MPI_Isend(&rank, 1, MPI_INT, nb[i], 40 + pos, g, &q[cnt + i]));
    }
    MPI_CHECK(MPI_Waitall(2 * cnt, q, MPI_STATUSES_IGNORE));
    for (int i = 0; i < cnt; i++)
        CHECK(in[i] == nb[i], "from neighbour %d got %d", nb[i], in[i]);
    int nr;
    MPI_CHECK(MPI_Graph_map(MPI_COMM_WORLD, size, index, edges, &nr));
    CHECK(nr == rank, "Graph_map gave %d", nr);
    MPI_CHECK(MPI_Comm_free(&g));
}

static int count_of(const int *a, int n, int v)
{
    int c = 0;
    for (int i = 0; i < n; i++)
        c += a[i] == v;
    return c;
}

static void dist_graph(void)
{
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    int w_in = 10 + left, w_out = 10 + rank;
    MPI_Comm g;
    MPI_CHECK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, &w_in, 1, &right, &w_out,
                                             MPI_INFO_NULL, 0, &g));
    int t, in, out, wtd;
    MPI_CHECK(MPI_Topo_test(g, &t));
    CHECK(t == MPI_DIST_GRAPH, "Topo_test = %d", t);
    MPI_CHECK(MPI_Dist_graph_neighbors_count(g, &in, &out, &wtd));
    CHECK(in == 1 && out == 1 && wtd, "adjacent counts %d %d %d", in, out, wtd);
    int s, sw, d, dw;
    MPI_CHECK(MPI_Dist_graph_neighbors(g, 1, &s, &sw, 1, &d, &dw));
    CHECK(s == left && sw == w_in && d == right && dw == w_out, "adjacent neighbours");
    int got = -1;
    MPI_CHECK(MPI_Sendrecv(&rank, 1, MPI_INT, d, 50, &got, 1, MPI_INT, s, 50, g, MPI_STATUS_IGNORE));
    CHECK(got == left, "ring over the distributed graph: %d", got);
    MPI_CHECK(MPI_Comm_free(&g));

    /* Every rank names two edges: left -> me and me -> right. */
    int srcs[2] = {left, rank}, degs[2] = {1, 1}, dsts[2] = {rank, right};
    MPI_CHECK(MPI_Dist_graph_create(MPI_COMM_WORLD, 2, srcs, degs, dsts, MPI_UNWEIGHTED,
                                    MPI_INFO_NULL, 0, &g));
    MPI_CHECK(MPI_Dist_graph_neighbors_count(g, &in, &out, &wtd));
    /* Each edge is named twice (by both its ends), so each neighbour
       appears twice; on one rank the ring is a self loop. */
    CHECK(in == 2 && out == 2 && !wtd, "Dist_graph_create counts %d %d %d", in, out, wtd);
    int ss[2], ds[2];
    MPI_CHECK(MPI_Dist_graph_neighbors(g, 2, ss, MPI_UNWEIGHTED, 2, ds, MPI_UNWEIGHTED));
    CHECK(count_of(ss, 2, left) == 2 && count_of(ds, 2, right) == 2, "Dist_graph_create neighbours");
    MPI_CHECK(MPI_Comm_free(&g));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_errors_return();

    int co[2];
    CHECK_CLASS(MPI_Cart_coords(MPI_COMM_WORLD, 0, 2, co), MPI_ERR_TOPOLOGY);
    dims();
    cart();
    graph();
    dist_graph();

    test_ok("topology");
    MPI_Finalize();
    return 0;
}
