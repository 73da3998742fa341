#include "exec/spin.hpp"

#include <sched.h>

namespace tccl {

void spinYield(bool adaptive) {
  if (!adaptive) {
    sched_yield();
    return;
  }
  // Per thread: the waiter that spins is the one whose core another task takes.
  thread_local YieldGovernor governor;
  const auto before = YieldGovernor::Clock::now();
  if (!governor.shouldYield(before, true)) return;
  sched_yield();
  governor.yielded(before, YieldGovernor::Clock::now());
}

}  // namespace tccl
