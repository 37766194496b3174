/* pair_line.c W MODE (docs/perf/log/performance-history.md, "Pair lines"): two processes pinned to
 * CPUs 0 and 1 ping-pong a counter, with W steps of a dependent multiply (~1 ns each)
 * between reading and answering. MODE 0: both words in one line (1line-halves);
 * 1: a ping line and a pong line (2line); 2: 2line with a PREFETCHW of the own line
 * after reading; 3: one line, the reader writing it at once after reading (1line+ack);
 * 4: one line with PAUSE in the spin. Prints the best of 5 batches: round trip and
 * one way in ns. Build: gcc -O2 -mprfchw -o pair_line pair_line.c */
// one-line two-halves mailbox vs two lines, with work W between read and reply
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdatomic.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
struct sh { _Alignas(64) _Atomic uint64_t a; _Atomic uint64_t pad[3]; _Atomic uint64_t b; _Atomic uint64_t pad2[3];
            _Alignas(64) _Atomic uint64_t ping; _Alignas(64) _Atomic uint64_t pong; _Alignas(64) _Atomic uint64_t go; };
static volatile uint64_t sink;
static void work(int w){ uint64_t x=sink; for(int i=0;i<w;i++){ x = x*6364136223846793005ULL+1; } sink=x; }
#define N 200000
int main(int argc,char**argv){
  int W=atoi(argv[1]); int mode=atoi(argv[2]);
  struct sh*s=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  pid_t p=fork(); int par=p!=0; pin(par?0:1);
  atomic_fetch_add(&s->go,1); while(atomic_load(&s->go)<2){}
  _Atomic uint64_t *mine, *theirs;
  if(mode==0||mode==3||mode==4){ mine = par? &s->a : &s->b; theirs = par? &s->b : &s->a; }
  else { mine = par? &s->ping : &s->pong; theirs = par? &s->pong : &s->ping; }
  double best=1e9;
  for(int b=0;b<6;b++){
    uint64_t base=(uint64_t)b*N; double t0=now();
    for(long i=1;i<=N;i++){ uint64_t v=base+i;
      if(par){ atomic_store_explicit(mine,v,memory_order_release); while(atomic_load_explicit(theirs,memory_order_acquire)!=v){ if(mode==4) __builtin_ia32_pause(); } if(mode==2) __builtin_prefetch((void*)mine,1,3); if(mode==3) atomic_store_explicit(mine+1,v,memory_order_relaxed); work(W);}
      else { while(atomic_load_explicit(theirs,memory_order_acquire)!=v){ if(mode==4) __builtin_ia32_pause(); } if(mode==2) __builtin_prefetch((void*)mine,1,3); if(mode==3) atomic_store_explicit(mine+1,v,memory_order_relaxed); work(W); atomic_store_explicit(mine,v,memory_order_release);} }
    double t=(now()-t0)/N*1e9; if(b&&t<best)best=t; }
  if(!par){_exit(0);} waitpid(p,0,0);
  printf("mode %s W %d rtt %.1f ns one-way %.1f\n", mode==4?"1line+pause":mode==3?"1line+ack":mode==2?"2line+pfw":mode?"2line":"1line-halves", W, best, best/2);
}
