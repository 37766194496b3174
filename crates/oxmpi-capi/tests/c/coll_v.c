/*
 * coll_v.c -- every collective in its blocking form, above all those built
 * on schedules: Gatherv, Scatterv, Allgatherv, Alltoallv, Alltoallw,
 * Reduce_scatter, Reduce_scatter_block, Scan, Exscan (the checks are in
 * coll_modes.h, shared with nbc.c and coll_persistent.c).
 *
 * Ranks: any number from 1 to 8 (minimum 1).
 */
#include "coll_modes.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    coll_setup(0);
    coll_all();
    coll_teardown();
    test_ok("coll_v");
    MPI_Finalize();
    return 0;
}
