// raw_pingpong: the floor under a small message on this host, with no library at all.
// Two processes (a fork) on one loopback TCP connection with TCP_NODELAY; a rank that
// waits spins on poll(2) with a zero timeout, then reads with readv, as tccl's point to
// point engine does.
//
//   gcc -O2 -o raw_pingpong bench/raw_pingpong.c
//   raw_pingpong pingpong|exchange [--bytes B (32)] [--iters N (20000)] [--warmup W (1000)]
//
// pingpong: the parent sends, the child answers; prints half a round trip in us (what
// tccl p2pbench --mode latency and osu_latency print). exchange: both send, then both
// read, each iteration; prints the time of one exchange in us (the messages of an 8-byte
// all-reduce at world 2). 32 bytes is what tccl puts on the wire for 8 bytes of payload
// (its 24-byte header and the payload).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double nowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char* what) {
  perror(what);
  exit(1);
}

static void sendAll(int fd, const char* buf, int n) {
  struct iovec v = {(void*)buf, (size_t)n};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  if (sendmsg(fd, &m, MSG_NOSIGNAL) != n) die("sendmsg");
}

static void readAll(int fd, char* buf, int n) {
  int got = 0;
  while (got < n) {
    struct pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, 0) == 0) {
    }
    struct iovec v = {buf + got, (size_t)(n - got)};
    ssize_t r = readv(fd, &v, 1);
    if (r > 0) {
      got += (int)r;
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      die("readv");
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 2 || (strcmp(argv[1], "pingpong") != 0 && strcmp(argv[1], "exchange") != 0)) {
    fprintf(stderr, "usage: raw_pingpong pingpong|exchange [--bytes B] [--iters N] [--warmup W]\n");
    return 2;
  }
  const int exchange = strcmp(argv[1], "exchange") == 0;
  int bytes = 32, iters = 20000, warmup = 1000;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--bytes") == 0)
      bytes = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--iters") == 0)
      iters = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--warmup") == 0)
      warmup = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "raw_pingpong: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (bytes < 1 || bytes > (1 << 20) || iters < 1 || warmup < 0) {
    fprintf(stderr, "raw_pingpong: bytes in [1, 1 MiB], iters >= 1, warmup >= 0\n");
    return 2;
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr*)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, (struct sockaddr*)&a, &len) != 0)
    die("listen");
  const pid_t child = fork();
  if (child < 0) die("fork");
  int fd;
  if (child == 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a) != 0) die("connect");
  } else {
    fd = accept(ls, NULL, NULL);
    if (fd < 0) die("accept");
  }
  close(ls);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char* out = calloc(1, (size_t)bytes);
  char* in = calloc(1, (size_t)bytes);
  if (!out || !in) die("calloc");
  const int first = child != 0;  // the parent sends first in a ping-pong
  double t0 = 0;
  for (int i = 0; i < warmup + iters; i++) {
    if (i == warmup) t0 = nowUs();
    if (exchange) {
      sendAll(fd, out, bytes);
      readAll(fd, in, bytes);
    } else if (first) {
      sendAll(fd, out, bytes);
      readAll(fd, in, bytes);
    } else {
      readAll(fd, in, bytes);
      sendAll(fd, out, bytes);
    }
  }
  const double per = (nowUs() - t0) / iters / (exchange ? 1 : 2);
  if (child != 0) {
    printf("%s %d B: %.3f us\n", exchange ? "exchange" : "pingpong one-way", bytes, per);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  }
  return 0;
}
