// duplex_sockets.c: does a bidirectional stream of messages between two processes on
// loopback go faster over one TCP connection carrying both directions (as tccl's p2p lane
// and Open MPI's TCP BTL do) or over two, one per direction? An experiment behind
// docs/PERFORMANCE.md ("2026-12-05"): osu_bibw's pattern without any library.
//
//   cc -O2 -o build-bench/duplex_sockets bench/duplex_sockets.c
//   build-bench/duplex_sockets SPLIT ITERS [MSG_BYTES]
//
// SPLIT 0: one connection; 1: two, each used in one direction. Each process, per
// iteration, sends a window of 64 messages of MSG_BYTES (default 32: tccl's 24-byte
// header and 8 bytes) with one send(2) each, and receives the peer's 64 as they come
// (reads of up to 64 KiB), nonblocking, yielding the core when neither moved; 100 warm-up
// iterations, then ITERS timed ones. The parent prints the time per message.
// Why the question: perf puts about 9 % of both tccl's and Open MPI's bibw samples in the
// socket lock's slow path under tcp_sendmsg (the peer's delivery into the same socket).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kWindow = 64, kWarmup = 100 };

static void die(const char* what) {
  perror(what);
  exit(1);
}

static int listenAny(int* port) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (l < 0 || bind(l, (struct sockaddr*)&a, sizeof a) || listen(l, 4)) die("listen");
  socklen_t n = sizeof a;
  if (getsockname(l, (struct sockaddr*)&a, &n)) die("getsockname");
  *port = ntohs(a.sin_port);
  return l;
}

static int dial(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((unsigned short)port);
  if (s < 0 || connect(s, (struct sockaddr*)&a, sizeof a)) die("connect");
  return s;
}

static void prepare(int s) {
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(s, F_SETFL, O_NONBLOCK);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char rbuf[1 << 16];
static char msg[1 << 22];

static void run(int tx, int rx, int iters, long size, int print) {
  double t0 = now();
  for (int it = 0; it < iters + kWarmup; ++it) {
    if (it == kWarmup) t0 = now();
    int sent = 0;
    long off = 0, got = 0;
    const long need = (long)kWindow * size;
    while (sent < kWindow || got < need) {
      int moved = 0;
      if (sent < kWindow) {
        ssize_t n = send(tx, msg + off, (size_t)(size - off), 0);
        if (n > 0) {
          moved = 1;
          off += n;
          if (off == size) off = 0, sent++;
        }
      }
      if (got < need) {
        size_t want = (size_t)(need - got) < sizeof rbuf ? (size_t)(need - got) : sizeof rbuf;
        ssize_t n = recv(rx, rbuf, want, 0);
        if (n > 0) moved = 1, got += n;
        if (n == 0) die("peer closed");
      }
      if (!moved) {
        struct pollfd p[2] = {{tx, sent < kWindow ? POLLOUT : 0, 0},
                              {rx, got < need ? POLLIN : 0, 0}};
        poll(p, 2, 0);
        sched_yield();
      }
    }
  }
  if (print) printf("%.3f us per message\n", (now() - t0) / iters / kWindow * 1e6);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SPLIT(0|1) ITERS [MSG_BYTES]\n", argv[0]);
    return 2;
  }
  const int split = atoi(argv[1]), iters = atoi(argv[2]);
  const long size = argc > 3 ? atol(argv[3]) : 32;
  if (iters < 1 || size < 1 || size > (long)sizeof msg) {
    fprintf(stderr, "ITERS >= 1, MSG_BYTES in [1, %zu]\n", sizeof msg);
    return 2;
  }
  memset(msg, 1, sizeof msg);
  int p1, p2;
  const int l1 = listenAny(&p1), l2 = listenAny(&p2);
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {  // sends on a, receives on b (the same connection unless split)
    const int a = dial(p1), b = split ? dial(p2) : a;
    prepare(a);
    if (split) prepare(b);
    run(a, b, iters, size, 0);
    _exit(0);
  }
  const int a = accept(l1, NULL, NULL), b = split ? accept(l2, NULL, NULL) : a;
  if (a < 0 || b < 0) die("accept");
  prepare(a);
  if (split) prepare(b);
  run(b, a, iters, size, 1);  // sends on b, receives on a
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
