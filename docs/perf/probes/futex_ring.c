/* futex_ring.c: the floor of any blocking wait between ranks of different
 * sessions (docs/perf/log/oversubscribed-waits.md, "The doorbell"): a token
 * passed round 4 processes, each in a session (so an autogroup) of its own,
 * through futexes in shared memory, with no spinning at all: each waits in
 * FUTEX_WAIT, then sets the next one's word and wakes it. Prints rank 0's
 * microseconds per hop.
 *
 *   gcc -O2 futex_ring.c -o futex_ring && ./futex_ring 500
 */
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long fx(atomic_int *a, int op, int v) { return syscall(SYS_futex, a, op, v, 0, 0, 0); }

int main(int argc, char **argv) {
    int n = 4, laps = argc > 1 ? atoi(argv[1]) : 500;
    /* One word per process, each on a line of its own. */
    atomic_int *w = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (w == MAP_FAILED)
        return 1;
    for (int i = 0; i < n; i++) {
        if (fork() == 0) {
            setsid();
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int l = 0; l < laps + (i == 0); l++) {
                if (!(i == 0 && l == 0)) /* rank 0 starts with the token */
                    while (atomic_exchange(&w[16 * i], 0) == 0)
                        fx(&w[16 * i], FUTEX_WAIT, 0);
                if (i == 0 && l == laps)
                    break;
                int nx = (i + 1) % n;
                atomic_store(&w[16 * nx], 1);
                fx(&w[16 * nx], FUTEX_WAKE, 1);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (i == 0) {
                double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
                printf("%.2f\n", ns / 1e3 / ((double)laps * n));
                fflush(stdout);
            }
            _exit(0);
        }
    }
    while (wait(0) > 0)
        ;
    return 0;
}
