// socket_trace.so: an LD_PRELOAD library that timestamps a process's socket sends and
// reads, so that the time of a small message can be split into the kernel's part and
// the program's own, the same way for any program (tccl, Open MPI, bench/raw_pingpong).
//
//   gcc -O2 -shared -fPIC -o socket_trace.so bench/socket_trace.c -ldl
//   SOCKET_TRACE=/tmp/st LD_PRELOAD=$PWD/socket_trace.so PROGRAM ...
//   (mpirun: -x LD_PRELOAD=... -x SOCKET_TRACE=...)
//   /usr/bin/python3 bench/socket_trace.py /tmp/st.PID1 /tmp/st.PID2
//
// Each process writes SOCKET_TRACE.<pid> at exit, one line per event, "KIND NS", NS from
// CLOCK_MONOTONIC (one clock for every process of the host):
//   0 a send call (sendmsg, send, sendto, writev, write) on a socket starts
//   1 it returns
//   3 a read call (readv, recvmsg, recv, recvfrom, read) on a socket starts
//   4 it returns with data (a read that finds nothing records no 4)
// Only the first 2^21 events are kept. Which descriptors are sockets is asked once per
// descriptor (fstat) and forgotten at close. A wrapped call costs two clock reads
// (about 45 ns here), on every program alike.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { kMax = 1 << 21, kFds = 65536 };
static unsigned char kinds[kMax];
static long stamps[kMax];
static int events;
static unsigned char fdKind[kFds];  // 0 unknown, 1 socket, 2 other

static long nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void mark(int kind) {
  int i = __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED);
  if (i >= kMax) return;
  kinds[i] = (unsigned char)kind;
  stamps[i] = nowNs();
}

static int isSocket(int fd) {
  if (fd < 0 || fd >= kFds) return 0;
  if (fdKind[fd] == 0) {
    struct stat st;
    fdKind[fd] = (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) ? 1 : 2;
  }
  return fdKind[fd] == 1;
}

__attribute__((destructor)) static void dump(void) {
  const char* out = getenv("SOCKET_TRACE");
  int n = events < kMax ? events : kMax;
  if (!out || n == 0) return;
  char name[4096];
  snprintf(name, sizeof name, "%s.%d", out, (int)getpid());
  FILE* f = fopen(name, "w");
  if (!f) return;
  for (int i = 0; i < n; i++) fprintf(f, "%d %ld\n", kinds[i], stamps[i]);
  fclose(f);
}

// One wrapper: the real call, marked `start` before it and `start` + 1 after it (for a
// read, only when it returned data).
#define WRAP(name, params, args, start, onlyWithData)             \
  ssize_t name params {                                           \
    static __typeof__(name)* real;                                \
    if (!real) real = (__typeof__(name)*)dlsym(RTLD_NEXT, #name); \
    const int s = isSocket(fd);                                   \
    if (s) mark(start);                                           \
    ssize_t r = real args;                                        \
    if (s && (!(onlyWithData) || r > 0)) mark((start) + 1);       \
    return r;                                                     \
  }

WRAP(sendmsg, (int fd, const struct msghdr* m, int flags), (fd, m, flags), 0, 0)
WRAP(send, (int fd, const void* b, size_t n, int flags), (fd, b, n, flags), 0, 0)
WRAP(sendto, (int fd, const void* b, size_t n, int flags, const struct sockaddr* a, socklen_t l),
     (fd, b, n, flags, a, l), 0, 0)
WRAP(writev, (int fd, const struct iovec* v, int n), (fd, v, n), 0, 0)
WRAP(write, (int fd, const void* b, size_t n), (fd, b, n), 0, 0)
WRAP(readv, (int fd, const struct iovec* v, int n), (fd, v, n), 3, 1)
WRAP(recvmsg, (int fd, struct msghdr* m, int flags), (fd, m, flags), 3, 1)
WRAP(recv, (int fd, void* b, size_t n, int flags), (fd, b, n, flags), 3, 1)
WRAP(recvfrom, (int fd, void* b, size_t n, int flags, struct sockaddr* a, socklen_t* l),
     (fd, b, n, flags, a, l), 3, 1)
WRAP(read, (int fd, void* b, size_t n), (fd, b, n), 3, 1)

int close(int fd) {
  static __typeof__(close)* real;
  if (!real) real = (__typeof__(close)*)dlsym(RTLD_NEXT, "close");
  if (fd >= 0 && fd < kFds) fdKind[fd] = 0;
  return real(fd);
}
