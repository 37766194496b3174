/* hog.c: N busy processes, each in a session (so an autogroup) of its own,
 * for SECONDS: the competing load of docs/perf/log/oversubscribed-waits.md.
 * They die with the parent (PR_SET_PDEATHSIG), so `kill PID` of it ends all.
 *
 *   gcc -O2 hog.c -o hog && ./hog 2 600 & HOG=$!; ...; kill $HOG
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    int n = atoi(argv[1]), secs = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            setsid();
            time_t t0 = time(0);
            volatile unsigned long x = 0;
            while (time(0) - t0 < secs)
                for (int k = 0; k < 1000000; k++)
                    x++;
            _exit(0);
        }
    }
    while (wait(0) > 0)
        ;
    return 0;
}
