/* evict_ahead.c K FB FA FE D (docs/perf/log/performance-history.md, "Evicting ahead"): two threads pinned to
 * CPUs 0 and 1; the producer writes 32-byte records (header word last, Release) into a
 * 256 KiB ring in windows of 64, the consumer polls each header and acknowledges the
 * window (the msgrate pattern). K: extra stack stores per record on the producer (an
 * MPI send makes about 30). FB 1: the consumer evicts (CLFLUSHOPT) each line it has
 * read. FA n: as its position enters a new line it evicts the line n lines ahead.
 * FE n: when it first finds a slot empty it evicts the n lines after it. D: pauses
 * between empty polls. Prints records per second, ns per window and ns of the
 * producer's 64 sends. Build: gcc -O2 -mclflushopt evict_ahead.c -lpthread */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#define CAP (256*1024)
#define SLOTS (CAP/32)
static _Alignas(64) volatile uint64_t ring[CAP/8];
static _Alignas(64) volatile uint64_t ack[8];
static int K,FB,FA,FE,D; static long N=20000;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);pthread_setaffinity_np(pthread_self(),sizeof s,&s);}
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static inline void fl(uint64_t slot){__builtin_ia32_clflushopt((void*)&ring[(slot%SLOTS)*4]);}
__attribute__((noinline)) static void send1(uint64_t pos, uint64_t stamp){
  volatile uint64_t junk[64];
  for(int i=0;i<K;i++) junk[i]=pos;
  uint64_t s=(pos%SLOTS)*4;
  ring[s+1]=pos; ring[s+2]=pos; ring[s+3]=pos;
  __atomic_store_n(&ring[s],stamp,__ATOMIC_RELEASE);
}
static void* cons(void*a){pin(1);uint64_t pos=0;
  for(long it=0;it<N+300;it++){for(int w=0;w<64;w++,pos++){uint64_t s=(pos%SLOTS)*4;uint64_t st=pos/SLOTS+1+((pos%SLOTS)<<20);
     int first=1;
     while(__atomic_load_n(&ring[s],__ATOMIC_ACQUIRE)!=st){ if(first&&FE){for(int l=1;l<=FE;l++) fl(pos+2*l); first=0;} for(int d=0;d<D;d++) __builtin_ia32_pause();}
     if(pos&1){ if(FB) fl(pos); if(FA) fl(pos+2*FA);} }
    __atomic_store_n(&ack[0],it+1,__ATOMIC_RELEASE);}
  return 0;}
int main(int c,char**v){K=atoi(v[1]);FB=atoi(v[2]);FA=atoi(v[3]);FE=atoi(v[4]);D=atoi(v[5]);pthread_t t;pthread_create(&t,0,cons,0);pin(0);uint64_t pos=0;double t0=0,ts=0;
  for(long it=0;it<N+300;it++){if(it==300)t0=now();
    double a=now(); for(int w=0;w<64;w++,pos++) send1(pos,pos/SLOTS+1+((pos%SLOTS)<<20)); if(it>=300) ts+=now()-a;
    while(__atomic_load_n(&ack[0],__ATOMIC_ACQUIRE)!=(uint64_t)it+1) __builtin_ia32_pause();}
  double dt=now()-t0;printf("K=%d FB=%d FA=%d FE=%d D=%d %.2f M/s window %.0f send %.0f\n",K,FB,FA,FE,D,64.0*N/dt*1e3,dt/N,ts/N);pthread_join(t,0);}
