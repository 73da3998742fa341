// The spin's yield rule (exec/spin.hpp): when a waiter stops yielding, and for how long.
#include "exec/spin.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace tccl {
namespace {

using Clock = YieldGovernor::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(SpinYield, AdaptiveOnlyWhereNoHostCanHoldMoreRanksThanCores) {
  EXPECT_TRUE(adaptiveYieldFor(1, 2));
  EXPECT_TRUE(adaptiveYieldFor(2, 2));
  EXPECT_FALSE(adaptiveYieldFor(3, 2));
  EXPECT_FALSE(adaptiveYieldFor(8, 2));
  EXPECT_TRUE(adaptiveYieldFor(8, 64));
  EXPECT_FALSE(adaptiveYieldFor(2, 0));  // cores unknown: yield always, as before
}

TEST(SpinYield, YieldsThatGiveTheCoreAwayForUnderAMillisecondKeepYielding) {
  YieldGovernor g;
  Clock::time_point t{};
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(g.shouldYield(t, true)) << i;
    EXPECT_EQ(g.yielded(t, t + microseconds(999)), YieldGovernor::After::Spin);  // under kSlowYield
    t += microseconds(1000);
  }
}

// Returns the rounds (of n) in which g yields, feeding it a yield of `took` each time.
std::string yieldPattern(YieldGovernor& g, Clock::time_point& t, int n, microseconds took) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    const bool y = g.shouldYield(t, true);
    out += y ? 'Y' : '.';
    if (y) g.yielded(t, t + took);
    t += microseconds(100);
  }
  return out;
}

TEST(SpinYield, QuickYieldsThinTheYieldsToEveryFourthRound) {
  static_assert(YieldGovernor::kQuietYields == 8 && YieldGovernor::kQuietEvery == 4);
  YieldGovernor g;
  Clock::time_point t{};
  // 1 us, under kSwitchedYield: nothing else ran. Eight such yields, then one round in four.
  const auto quick = microseconds(1);
  EXPECT_EQ(yieldPattern(g, t, 8, quick), "YYYYYYYY");
  EXPECT_EQ(yieldPattern(g, t, 12, quick), "...Y...Y...Y");
  // A yield that gave the core away (exactly kSwitchedYield) ends the thinning at once;
  // eight quick ones in a row bring it back.
  EXPECT_EQ(yieldPattern(g, t, 4, YieldGovernor::kSwitchedYield), "...Y");
  EXPECT_EQ(yieldPattern(g, t, 3, YieldGovernor::kSwitchedYield), "YYY");
  EXPECT_EQ(yieldPattern(g, t, 7, quick), "YYYYYYY");
  EXPECT_EQ(yieldPattern(g, t, 1, YieldGovernor::kSharedYieldMax), "Y");  // not quick either
  EXPECT_EQ(yieldPattern(g, t, 16, quick), "YYYYYYYY...Y...Y");
  // Not adaptive: every round, whatever was seen.
  EXPECT_TRUE(g.shouldYield(t, false));
  EXPECT_TRUE(g.shouldYield(t, false));
}

// Feeds g `n` yields of `took`, 20 us apart; returns how many asked for a move.
int moves(YieldGovernor& g, Clock::time_point& t, int n, std::chrono::nanoseconds took) {
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (g.yielded(t, t + took) == YieldGovernor::After::MoveOffThisCore) ++m;
    t += microseconds(20);
  }
  return m;
}

TEST(SpinYield, AStreakOfBriefSwitchesAsksForAMoveAtMostOncePerGap) {
  YieldGovernor g(20);
  Clock::time_point t{};
  const auto brief = microseconds(10);
  EXPECT_EQ(moves(g, t, 19, brief), 0);
  EXPECT_EQ(g.yielded(t, t + brief), YieldGovernor::After::MoveOffThisCore);  // the 20th
  t += microseconds(20);
  // Another streak within kMoveGap of the move asks for nothing, and starts again.
  EXPECT_EQ(moves(g, t, 20, brief), 0);  // 400 us later
  t += YieldGovernor::kMoveGap;
  EXPECT_EQ(moves(g, t, 19, brief), 0);
  EXPECT_EQ(moves(g, t, 1, brief), 1);
  // The edges: exactly kSwitchedYield counts; kSharedYieldMax does not.
  EXPECT_EQ(moves(g, t, 100, YieldGovernor::kSharedYieldMax), 0);
  t += YieldGovernor::kMoveGap;
  EXPECT_EQ(moves(g, t, 20, YieldGovernor::kSwitchedYield), 1);
  EXPECT_EQ(moves(g, t, 100, YieldGovernor::kSwitchedYield - std::chrono::nanoseconds(1)), 0);
}

TEST(SpinYield, AQuickALongOrASlowYieldBreaksTheStreak) {
  const auto brief = microseconds(10);
  for (auto breaker : {std::chrono::nanoseconds(microseconds(1)),
                       std::chrono::nanoseconds(YieldGovernor::kSharedYieldMax),
                       std::chrono::nanoseconds(YieldGovernor::kSlowYield)}) {
    YieldGovernor g(16);
    Clock::time_point t{};
    EXPECT_EQ(moves(g, t, 15, brief), 0);
    EXPECT_EQ(moves(g, t, 1, breaker), 0);
    t += milliseconds(20);  // past a slow yield's kYieldOff (the governor is not asked here)
    EXPECT_EQ(moves(g, t, 15, brief), 0) << breaker.count();
    EXPECT_EQ(moves(g, t, 1, brief), 1) << breaker.count();
  }
}

TEST(SpinYield, DefaultStreakIsKSharedStreak) {
  YieldGovernor g;
  Clock::time_point t{};
  EXPECT_EQ(moves(g, t, YieldGovernor::kSharedStreak - 1, microseconds(5)), 0);
  EXPECT_EQ(moves(g, t, 1, microseconds(5)), 1);
}

// The real move: where it happens the thread runs elsewhere and its affinity is as before.
TEST(SpinYield, MoveOffThisCoreLeavesTheAffinityMaskAsItWas) {
  std::thread th([] {
    cpu_set_t before;
    ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
    const int here = sched_getcpu();
    const bool moved = moveOffThisCore();
    const int there = sched_getcpu();
    cpu_set_t after;
    ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
    EXPECT_TRUE(CPU_EQUAL(&before, &after));
    if (CPU_COUNT(&before) < 2) {
      EXPECT_FALSE(moved);
    }
    if (moved) {
      EXPECT_NE(here, there);
    }
  });
  th.join();
}

TEST(SpinYield, ASlowYieldTurnsYieldingOffForTenMilliseconds) {
  YieldGovernor g;
  const Clock::time_point t0{};
  const Clock::time_point back = t0 + YieldGovernor::kSlowYield;  // exactly slow
  g.yielded(t0, back);
  EXPECT_FALSE(g.shouldYield(back, true));
  EXPECT_FALSE(g.shouldYield(back + milliseconds(10) - microseconds(1), true));
  EXPECT_TRUE(g.shouldYield(back + milliseconds(10), true));
  // Not adaptive: always yields, whatever was seen.
  EXPECT_TRUE(g.shouldYield(back, false));
}

TEST(SpinYield, AnotherSlowYieldExtendsFromItsOwnEnd) {
  YieldGovernor g;
  Clock::time_point t{};
  g.yielded(t, t + milliseconds(3));
  t += milliseconds(13);  // off until 13 ms
  ASSERT_TRUE(g.shouldYield(t, true));
  g.yielded(t, t + milliseconds(2));  // slow again: off until 25 ms, 12 ms from t
  EXPECT_FALSE(g.shouldYield(t + milliseconds(11), true));
  EXPECT_TRUE(g.shouldYield(t + milliseconds(12), true));
  // A fast yield after that changes nothing.
  g.yielded(t + milliseconds(12), t + milliseconds(12) + microseconds(5));
  EXPECT_TRUE(g.shouldYield(t + milliseconds(12) + microseconds(6), true));
}

}  // namespace
}  // namespace tccl
