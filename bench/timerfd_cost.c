// What arming and disarming a timerfd costs on this machine, against a plain system call and
// a clock read: the call queue's grace timer (src/core/progress.cpp) pays one
// timerfd_settime per arming. docs/PERFORMANCE.md, "2026-12-06 evening".
//
//   cc -O2 -o /tmp/timerfd_cost bench/timerfd_cost.c && /tmp/timerfd_cost
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
  const int n = 200000;
  const int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) {
    perror("timerfd_create");
    return 1;
  }
  const struct itimerspec zero = {{0, 0}, {0, 0}};
  struct itimerspec at = {{0, 0}, {0, 0}};
  double t0 = seconds();
  for (int i = 0; i < n; ++i) {
    // Armed 1 ms ahead, as the grace timer is, then disarmed: it never fires.
    clock_gettime(CLOCK_MONOTONIC, &at.it_value);
    at.it_value.tv_nsec += 1000000;
    if (at.it_value.tv_nsec >= 1000000000) {
      at.it_value.tv_sec += 1;
      at.it_value.tv_nsec -= 1000000000;
    }
    timerfd_settime(fd, TFD_TIMER_ABSTIME, &at, NULL);
    timerfd_settime(fd, 0, &zero, NULL);
  }
  printf("timerfd_settime (arm + disarm, per call) %.3f us\n", (seconds() - t0) / (2.0 * n) * 1e6);
  t0 = seconds();
  for (int i = 0; i < n; ++i) (void)getppid();
  printf("getppid                                  %.3f us\n", (seconds() - t0) / n * 1e6);
  struct timespec ts;
  t0 = seconds();
  for (int i = 0; i < n; ++i) clock_gettime(CLOCK_MONOTONIC, &ts);
  printf("clock_gettime (vDSO)                     %.3f us\n", (seconds() - t0) / n * 1e6);
  close(fd);
  return 0;
}
