/* ring_floor.c: the floor of a shared-memory ring on this machine, with no MPI
 * around it (docs/perf/log/performance-history.md, "The slow state's floor", 2026-11-26).
 *
 * Two threads pinned to cores 0 and 1 and two 64 KiB rings of 32-byte records
 * (an 8-byte header word with the lap stamp, written last with Release, as in
 * oxmpi's sm ring). Mode 0: ping-pong of one record, prints half the round trip.
 * Mode 1: windows of 64 records and a one-record reply, prints the message rate.
 * K (optional): private stores the producer makes per record besides the ring's
 * (the send path's own stores), to see how they decide the rate in the slow state.
 *
 *   gcc -O2 -pthread ring_floor.c -o ring_floor && ./ring_floor 1 50
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <time.h>
#define CAP 65536
#define SLOT 32
typedef struct { _Alignas(64) _Atomic uint64_t w[CAP/8]; } ring;
static ring *R[2];
static int N=400000, WIN=64, mode, K=0; static volatile uint64_t priv[4096];
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);pthread_setaffinity_np(pthread_self(),sizeof s,&s);}
typedef struct { ring *r; uint64_t pos; } end_;
static inline void put(end_ *e, uint64_t v){ for(int k=0;k<K;k++) priv[(k*8)&4095]=v+k; uint64_t off=(e->pos%CAP)/8; uint32_t stamp=e->pos/CAP+1;
  atomic_store_explicit(&e->r->w[off+1],v,memory_order_relaxed); atomic_store_explicit(&e->r->w[off+2],v,memory_order_relaxed);
  atomic_store_explicit(&e->r->w[off],(uint64_t)stamp|(1ull<<40),memory_order_release); e->pos+=SLOT; }
static inline uint64_t get(end_ *e){ uint64_t off=(e->pos%CAP)/8; uint32_t stamp=e->pos/CAP+1; uint64_t h;
  while(((h=atomic_load_explicit(&e->r->w[off],memory_order_acquire))&0xffffffff)!=stamp) __builtin_ia32_pause();
  uint64_t v=atomic_load_explicit(&e->r->w[off+1],memory_order_relaxed); e->pos+=SLOT; return v; }
static void *peer(void*a){ pin(1); end_ in={R[0],0}, out={R[1],0};
  if(mode==0) for(int i=0;i<N;i++){ get(&in); put(&out,i);} 
  else for(int i=0;i<N/WIN;i++){ for(int k=0;k<WIN;k++) get(&in); put(&out,i);}
  return 0;}
int main(int c,char**v){ mode=atoi(v[1]); if(c>2) K=atoi(v[2]); R[0]=aligned_alloc(64,sizeof(ring));R[1]=aligned_alloc(64,sizeof(ring));
 for(int i=0;i<CAP/8;i++){R[0]->w[i]=0;R[1]->w[i]=0;}
 pthread_t t; pin(0); pthread_create(&t,0,peer,0); end_ out={R[0],0}, in={R[1],0}; struct timespec a,b; clock_gettime(CLOCK_MONOTONIC,&a);
 if(mode==0) for(int i=0;i<N;i++){ put(&out,i); get(&in);} else for(int i=0;i<N/WIN;i++){ for(int k=0;k<WIN;k++) put(&out,k); get(&in);} 
 clock_gettime(CLOCK_MONOTONIC,&b); pthread_join(t,0); double ns=((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec));
 if(mode==0) printf("ring pingpong half-rtt %.1f ns\n",ns/N/2); else printf("ring msgrate %.2f M/s\n",(N/WIN)*WIN/ns*1e3); return 0;}
