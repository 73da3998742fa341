// The spin of a rank waiting for its peers: what it does between two polls of its links.
//
// A waiting driver (the executor, the p2p engine) polls its links for TCCL_SPIN_US before it
// sleeps, and gives its core away between polls with sched_yield(2): with more ranks than
// cores on a host, the peer it waits for may need that very core. But sched_yield hands the
// core to whatever else is runnable there, and a task of other work (a compile, a data
// loader at a lower priority) then keeps it for a whole time slice: with two nice-10 busy
// loops beside a world of 2 on 2 cores, 8-byte all-reduces took 28-106 us and p2p latency
// 690-910 us against about 5 us without the yield (docs/PERFORMANCE.md, "2026-12-07
// (afternoon)"). So where no host can hold more ranks than cores (the world is no larger
// than rank 0's cores), a yield that lost the core for kSlowYield or more turns yielding
// off on that thread for kYieldOff: it spins on its polls without yielding, as Open MPI
// does. Elsewhere every round yields, as before. The cost: with a single busy loop beside
// a world of 2 on 2 cores, where yielding still pays, 8-byte all-reduces ran 23-37 % slower
// (medians of 6); waiting for 3 slow yields within 10 ms and then stopping for 100 ms was
// worse there (docs/PERFORMANCE.md).
#pragma once

#include <chrono>

namespace tccl {

// Whether a communicator's drivers may stop yielding (see above): a world no larger than
// rank 0's cores (0: unknown, no).
inline bool adaptiveYieldFor(int worldSize, int cores) { return cores > 0 && worldSize <= cores; }

// A thread's yield rule, as a pure function of time (for tests).
class YieldGovernor {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kSlowYield{1000};
  static constexpr std::chrono::milliseconds kYieldOff{10};

  // Whether to yield now: always when not adaptive; else unless a slow yield was seen
  // less than kYieldOff ago.
  bool shouldYield(Clock::time_point now, bool adaptive) const {
    return !adaptive || now >= offUntil_;
  }
  // A yield ran from `before` to `after`.
  void yielded(Clock::time_point before, Clock::time_point after) {
    if (after - before >= kSlowYield) offUntil_ = after + kYieldOff;
  }

 private:
  Clock::time_point offUntil_{};
};

// One round of a spin: sched_yield(2), as the calling thread's YieldGovernor says.
void spinYield(bool adaptive);

}  // namespace tccl
