#include "exec/spin.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>

namespace tccl {

namespace {

// Whether the machine has no more runnable tasks than online CPUs (the fourth field of
// /proc/loadavg counts them, the caller included): then, with two of them sharing the
// caller's CPU, another CPU idles. With more (a busy loop beside a world of 2 on 2 cores),
// the ranks sharing a core leave the other to the busy task, and a move would trade the
// peer for it: measured slower (docs/PERFORMANCE.md).
bool runnableFitTheCpus() {
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  long running = 0;
  if (std::sscanf(buf, "%*s %*s %*s %ld/", &running) != 1) return false;
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  return running > 0 && cpus > 0 && running <= cpus;
}

}  // namespace

bool moveOffThisCore() {
  if (!runnableFitTheCpus()) return false;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return false;
  const int here = sched_getcpu();
  if (here < 0 || here >= CPU_SETSIZE || !CPU_ISSET(here, &mask) || CPU_COUNT(&mask) < 2) {
    return false;
  }
  cpu_set_t others = mask;
  CPU_CLR(here, &others);
  // The kernel moves the thread before the call returns (its CPU is no longer allowed);
  // restoring the mask afterwards leaves it where it went.
  if (sched_setaffinity(0, sizeof others, &others) != 0) return false;
  sched_setaffinity(0, sizeof mask, &mask);
  return true;
}

void spinYield(bool adaptive) {
  if (!adaptive) {
    sched_yield();
    return;
  }
  // Per thread: the waiter that spins is the one whose core another task takes. The
  // streak limit differs between threads (spin.hpp).
  thread_local YieldGovernor governor(YieldGovernor::kSharedStreak +
                                      static_cast<int>(gettid() % YieldGovernor::kSharedStreak));
  const auto before = YieldGovernor::Clock::now();
  if (!governor.shouldYield(before, true)) return;
  sched_yield();
  if (governor.yielded(before, YieldGovernor::Clock::now()) ==
      YieldGovernor::After::MoveOffThisCore) {
    moveOffThisCore();
  }
}

}  // namespace tccl
