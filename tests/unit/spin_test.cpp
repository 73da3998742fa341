// The spin's yield rule (exec/spin.hpp): when a waiter stops yielding, and for how long.
#include "exec/spin.hpp"

#include <gtest/gtest.h>

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

TEST(SpinYield, FastYieldsKeepYielding) {
  YieldGovernor g;
  Clock::time_point t{};
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(g.shouldYield(t, true)) << i;
    g.yielded(t, t + microseconds(999));  // just under kSlowYield
    t += microseconds(1000);
  }
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
