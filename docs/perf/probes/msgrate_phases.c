/* msgrate_phases.c [N] (docs/perf/log/performance-history.md, "Evicting ahead"): the anchors' msgrate
 * pattern (rank 0: 64 MPI_Isend of 8 bytes, MPI_Waitall, a 4-byte ack by MPI_Recv;
 * rank 1: 64 MPI_Irecv, MPI_Waitall, the ack) with a timer around each phase. Prints,
 * per rank, the rate and the mean ns per window spent posting, waiting and in the
 * last call. Build with any mpicc; run with 2 ranks pinned. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#define W 64
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int c,char**v){MPI_Init(&c,&v);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);int p=1-r;
 char sb[64]={0},rb[64];MPI_Request q[W];int ack=0;int N=c>1?atoi(v[1]):20000;
 double a=0,b=0,d=0;
 for(int rep=0;rep<2;rep++){a=b=d=0;MPI_Barrier(MPI_COMM_WORLD);double t0=now();
 for(int it=0;it<N;it++){
  double t1=now();
  if(r==0){for(int w=0;w<W;w++)MPI_Isend(sb,8,MPI_CHAR,p,1,MPI_COMM_WORLD,&q[w]);
   double t2=now();MPI_Waitall(W,q,MPI_STATUSES_IGNORE);double t3=now();
   MPI_Recv(&ack,1,MPI_INT,p,2,MPI_COMM_WORLD,MPI_STATUS_IGNORE);double t4=now();a+=t2-t1;b+=t3-t2;d+=t4-t3;}
  else{for(int w=0;w<W;w++)MPI_Irecv(rb,8,MPI_CHAR,p,1,MPI_COMM_WORLD,&q[w]);
   double t2=now();MPI_Waitall(W,q,MPI_STATUSES_IGNORE);double t3=now();
   MPI_Send(&ack,1,MPI_INT,p,2,MPI_COMM_WORLD);double t4=now();a+=t2-t1;b+=t3-t2;d+=t4-t3;}
 }
 double t=now()-t0;
 if(rep==1)printf("rank %d rate %.2f M/s  per window: post %.0f ns wait %.0f ns last %.0f ns (total %.0f)\n",r,W*N/t*1e3,a/N,b/N,d/N,t/N);}
 MPI_Finalize();}
