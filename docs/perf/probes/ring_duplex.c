/* ring_duplex.c: where a shared-memory ping-pong's floor lies on this machine
 * (docs/perf/log/performance-history.md, "The small receive from any source", 2026-11-26).
 *
 * Two pinned threads, one-slot records (an 8-byte header word with the lap
 * stamp, written last with Release, as in oxmpi's sm ring), 1024 lines.
 * Mode 0: two rings, one record per line each. Mode 1: the two directions
 * interleaved, each line holding one record of each, so that a reply goes
 * into the line its request just came in. W (optional): iterations of a
 * dependent multiply-add the responder runs between receiving and replying
 * (about 4 cycles each), to see what software on the critical path costs in
 * each machine state. Prints half the round trip.
 *
 *   gcc -O2 -pthread ring_duplex.c -o ring_duplex && ./ring_duplex 1 100
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <time.h>
#define LINES 1024
typedef struct { _Alignas(64) _Atomic uint64_t w[LINES*8]; } ring;
static ring *R; static int N=400000, IL, W;
static ring *R2;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);pthread_setaffinity_np(pthread_self(),sizeof s,&s);}
typedef struct { ring *r; int d; uint64_t pos; } end_;
static inline void put(end_ *e, uint64_t v){ uint64_t off=(e->pos%LINES)*8+e->d*4; uint32_t stamp=e->pos/LINES+1;
  atomic_store_explicit(&e->r->w[off+1],v,memory_order_relaxed); atomic_store_explicit(&e->r->w[off+2],v,memory_order_relaxed);
  atomic_store_explicit(&e->r->w[off],(uint64_t)stamp|(1ull<<40),memory_order_release); e->pos++; }
static inline uint64_t get(end_ *e){ uint64_t off=(e->pos%LINES)*8+e->d*4; uint32_t stamp=e->pos/LINES+1; uint64_t h;
  while(((h=atomic_load_explicit(&e->r->w[off],memory_order_acquire))&0xffffffff)!=stamp) __builtin_ia32_pause();
  uint64_t v=atomic_load_explicit(&e->r->w[off+1],memory_order_relaxed); e->pos++; return v; }
static void *peer(void*a){ pin(1); end_ in={R,0,0}, out={IL?R:R2,IL?1:0,0};
  for(int i=0;i<N;i++){ uint64_t x=get(&in); for(int j=0;j<W;j++){ x = x*6364136223846793005ull + j; __asm__ volatile("" : "+r"(x)); } put(&out,x);} return 0;}
int main(int c,char**v){ IL=atoi(v[1]); W=c>2?atoi(v[2]):0; R=aligned_alloc(64,sizeof(ring)); R2=aligned_alloc(64,sizeof(ring));
 for(int i=0;i<LINES*8;i++){R->w[i]=0;R2->w[i]=0;}
 pthread_t t; pin(0); pthread_create(&t,0,peer,0); end_ out={R,0,0}, in={IL?R:R2,IL?1:0,0}; struct timespec a,b; clock_gettime(CLOCK_MONOTONIC,&a);
 for(int i=0;i<N;i++){ put(&out,i); get(&in);}
 clock_gettime(CLOCK_MONOTONIC,&b); pthread_join(t,0); double ns=((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec));
 printf("%s half-rtt %.1f ns\n", IL?"interleaved":"separate(64B slots)", ns/N/2); return 0;}
