/* tcp_lowat.c: loopback TCP bandwidth with the receiver reading as soon as
 * anything arrived (mode 0: non-blocking recv in a loop; mode 1: poll first)
 * or only once LOWAT bytes are queued (mode 1 with SO_RCVLOWAT), the sender
 * writing CHUNK bytes per call (docs/perf/log/performance-history.md, 2026-11-26).
 * Windows of 64 messages of 1 MiB into distinct slots, as the bw test does.
 *
 *   gcc -O2 tcp_lowat.c -o tcp_lowat && ./tcp_lowat 1 262144
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <time.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#define MSG (1<<20)
#define WIN 64
#define ITERS 8
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); long lowat=argc>2?atol(argv[2]):0; int chunk=argc>3?atoi(argv[3]):MSG;
  int ls=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)};
  bind(ls,(void*)&a,sizeof a);listen(ls,1);socklen_t l=sizeof a;getsockname(ls,(void*)&a,&l);
  if(fork()==0){pin(1);int s=socket(AF_INET,SOCK_STREAM,0);connect(s,(void*)&a,sizeof a);int one=1;setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);
    char*b=aligned_alloc(4096,MSG);memset(b,'a',MSG);
    for(int it=0;it<ITERS+1;it++){for(int w=0;w<WIN;w++){size_t o=0;while(o<MSG){ssize_t n=send(s,b+o,MSG-o<chunk?MSG-o:chunk,MSG_NOSIGNAL);if(n>0)o+=n;}} char c;recv(s,&c,1,MSG_WAITALL);}
    _exit(0);}
  pin(0);int s=accept(ls,0,0);int one=1;setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);fcntl(s,F_SETFL,O_NONBLOCK);
  if(lowat)setsockopt(s,SOL_SOCKET,SO_RCVLOWAT,&lowat,sizeof lowat);
  char*r=aligned_alloc(4096,(size_t)MSG*WIN);memset(r,0,(size_t)MSG*WIN);
  double t0=0; long eag=0, calls=0;
  for(int it=0;it<ITERS+1;it++){ if(it==1)t0=now();
    long cur=lowat; if(lowat)setsockopt(s,SOL_SOCKET,SO_RCVLOWAT,&cur,sizeof cur);
    for(int w=0;w<WIN;w++){size_t o=0;char*d=r+(size_t)w*MSG;while(o<MSG){
      long left=(long)(WIN-w)*MSG-o; if(lowat&&left<cur){cur=left;setsockopt(s,SOL_SOCKET,SO_RCVLOWAT,&cur,sizeof cur);}
      if(mode==1){struct pollfd p={s,POLLIN,0};poll(&p,1,0);if(!(p.revents&POLLIN)){eag++;continue;}}
      ssize_t n=recv(s,d+o,MSG-o,0);calls++;if(n>0)o+=n;else eag++;}}
    send(s,"x",1,0);}
  double t=now()-t0; printf("mode=%d lowat=%ld chunk=%d %.0f MB/s calls/msg=%.1f eagain/msg=%.1f\n",mode,lowat,chunk,(double)MSG*WIN*ITERS/t/1e6,(double)calls/(WIN*(ITERS+1)),(double)eag/(WIN*(ITERS+1)));
  wait(0);return 0;}
