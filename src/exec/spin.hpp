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
//
// Where that rule applies, a thread's yields also say two more things:
// - A yield that returns within kSwitchedYield found nothing else runnable on this core
//   (about 0.5 us here, a system call and a pass through the scheduler): after
//   kQuietYields such yields in a row the spin yields only every kQuietEvery-th round,
//   which shortens the time between two polls, until a yield gives the core away again.
// - kSharedStreak (per thread, see YieldGovernor's constructor) yields in a row that each
//   gave the core away for kSwitchedYield up to kSharedYieldMax mean that another task
//   runs briefly on this core between every two of its polls: typically the peer rank it
//   ping-pongs with, placed on the same core at a wake-up while another core idles.
//   Spinning on, the two stay there until the kernel's load balancer separates them,
//   which took whole 8-byte latency runs (about 20 ms) at twice the time per message on
//   this machine (docs/PERFORMANCE.md, "2026-12-07 (night)"). The thread then moves
//   itself off its core (moveOffThisCore), once per kMoveGap at most, and only where the
//   machine has no more runnable tasks than CPUs: it narrows its CPU affinity to the
//   other CPUs it may use and at once restores it, and the kernel places it among them.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

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
  static constexpr std::chrono::microseconds kSwitchedYield{2};
  static constexpr std::chrono::microseconds kSharedYieldMax{50};
  static constexpr int kQuietYields = 8;
  static constexpr uint32_t kQuietEvery = 4;
  static constexpr int kSharedStreak = 16;
  static constexpr std::chrono::milliseconds kMoveGap{1};

  // streakLimit: the shared-core streak that asks for a move. Two ranks sharing a core
  // count their streaks in step, so each thread takes kSharedStreak plus a number of its
  // own (spin.cpp: its thread id mod kSharedStreak); with equal limits both would move,
  // to the same core.
  explicit YieldGovernor(int streakLimit = kSharedStreak) : streakLimit_(streakLimit) {}

  // Whether to yield in this round of the spin: always when not adaptive; else not for
  // kYieldOff after a slow yield, and only every kQuietEvery-th round after kQuietYields
  // quick ones in a row.
  bool shouldYield(Clock::time_point now, bool adaptive) {
    if (!adaptive) return true;
    if (now < offUntil_) return false;
    if (quiet_ < kQuietYields) return true;
    return ++round_ % kQuietEvery == 0;
  }

  enum class After : uint8_t { Spin, MoveOffThisCore };
  // A yield ran from `before` to `after`.
  After yielded(Clock::time_point before, Clock::time_point after) {
    const auto took = after - before;
    if (took < kSwitchedYield) {
      if (quiet_ < kQuietYields) ++quiet_;
      shared_ = 0;
      return After::Spin;
    }
    quiet_ = 0;
    round_ = 0;
    if (took >= kSharedYieldMax) {
      if (took >= kSlowYield) offUntil_ = after + kYieldOff;
      shared_ = 0;
      return After::Spin;
    }
    if (++shared_ < streakLimit_) return After::Spin;
    shared_ = 0;
    if (movedAt_ && after - *movedAt_ < kMoveGap) return After::Spin;
    movedAt_ = after;
    return After::MoveOffThisCore;
  }

 private:
  Clock::time_point offUntil_{};
  int quiet_ = 0;       // quick yields in a row (capped at kQuietYields)
  uint32_t round_ = 0;  // rounds since the spin went quiet
  int shared_ = 0;      // yields in a row that gave the core away briefly
  int streakLimit_;
  std::optional<Clock::time_point> movedAt_;
};

// One round of a spin: sched_yield(2), as the calling thread's YieldGovernor says, and
// a move off this core when it asks for one.
void spinYield(bool adaptive);

// Moves the calling thread to another CPU of its affinity mask, leaving the mask as it
// was, where the machine runs no more runnable tasks than it has CPUs (/proc/loadavg).
// False (and nothing done) where it runs more, the mask has no other CPU, or a call fails.
bool moveOffThisCore();

}  // namespace tccl
