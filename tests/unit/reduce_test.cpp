// Reduction kernels: every dtype x op with exact expected values, aliasing, integer
// wraparound without undefined behaviour, NaN rules, and the Avg division. The 16-bit
// floats: round to nearest even (ties both ways), overflow, subnormals, inf and NaN.
// (Randomised comparisons against an independent reference are in half_test.cpp.)
#include "reduce/reduce.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tccl/half.hpp"

namespace tccl::reduce {
namespace {

template <typename T>
struct Traits;
template <>
struct Traits<float> {
  static constexpr DataType kType = DataType::Float32;
};
template <>
struct Traits<double> {
  static constexpr DataType kType = DataType::Float64;
};
template <>
struct Traits<int32_t> {
  static constexpr DataType kType = DataType::Int32;
};
template <>
struct Traits<int64_t> {
  static constexpr DataType kType = DataType::Int64;
};
template <>
struct Traits<int8_t> {
  static constexpr DataType kType = DataType::Int8;
};
template <>
struct Traits<uint8_t> {
  static constexpr DataType kType = DataType::UInt8;
};

template <typename T>
std::vector<T> run(const std::vector<T>& a, const std::vector<T>& b, ReduceOp op) {
  std::vector<T> dst(a.size(), T(99));
  apply(dst.data(), a.data(), b.data(), a.size(), Traits<T>::kType, op);
  return dst;
}

// Small values every type represents exactly; results are exact too.
template <typename T>
void checkAllOps() {
  const std::vector<T> a = {T(1), T(-2), T(3), T(0), T(-7), T(6), T(5)};
  const std::vector<T> b = {T(4), T(5), T(-6), T(9), T(-1), T(6), T(-3)};
  const std::vector<T> sum = {T(5), T(3), T(-3), T(9), T(-8), T(12), T(2)};
  const std::vector<T> prod = {T(4), T(-10), T(-18), T(0), T(7), T(36), T(-15)};
  const std::vector<T> mn = {T(1), T(-2), T(-6), T(0), T(-7), T(6), T(-3)};
  const std::vector<T> mx = {T(4), T(5), T(3), T(9), T(-1), T(6), T(5)};
  EXPECT_EQ(run(a, b, ReduceOp::Sum), sum);
  EXPECT_EQ(run(a, b, ReduceOp::Avg), sum) << "Avg reduces as Sum; the division is separate";
  EXPECT_EQ(run(a, b, ReduceOp::Prod), prod);
  EXPECT_EQ(run(a, b, ReduceOp::Min), mn);
  EXPECT_EQ(run(a, b, ReduceOp::Max), mx);
  // Operand order does not matter for these.
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    EXPECT_EQ(run(a, b, op), run(b, a, op)) << static_cast<int>(op);
  }
}

TEST(Reduce, Float32AllOps) { checkAllOps<float>(); }
TEST(Reduce, Float64AllOps) { checkAllOps<double>(); }
TEST(Reduce, Int32AllOps) { checkAllOps<int32_t>(); }
TEST(Reduce, Int64AllOps) { checkAllOps<int64_t>(); }
TEST(Reduce, Int8AllOps) { checkAllOps<int8_t>(); }

TEST(Reduce, UInt8AllOps) {
  // Unsigned order for Min and Max; Sum and Prod modulo 256.
  const std::vector<uint8_t> a = {1, 254, 3, 0, 249, 6, 200};
  const std::vector<uint8_t> b = {4, 5, 250, 9, 255, 6, 100};
  EXPECT_EQ(run(a, b, ReduceOp::Sum), (std::vector<uint8_t>{5, 3, 253, 9, 248, 12, 44}));
  EXPECT_EQ(run(a, b, ReduceOp::Avg), (std::vector<uint8_t>{5, 3, 253, 9, 248, 12, 44}));
  // 254*5 = 1270 = 4*256 + 246; 3*250 = 750 = 2*256 + 238; 249*255 = 63495 = 248*256 + 7;
  // 200*100 = 20000 = 78*256 + 32.
  EXPECT_EQ(run(a, b, ReduceOp::Prod), (std::vector<uint8_t>{4, 246, 238, 0, 7, 36, 32}));
  EXPECT_EQ(run(a, b, ReduceOp::Min), (std::vector<uint8_t>{1, 5, 3, 0, 249, 6, 100}));
  EXPECT_EQ(run(a, b, ReduceOp::Max), (std::vector<uint8_t>{4, 254, 250, 9, 255, 6, 200}));
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    EXPECT_EQ(run(a, b, op), run(b, a, op)) << static_cast<int>(op);
  }
}

template <typename T>
void checkAliasing() {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)));
    const std::vector<T> a = {T(1), T(-2), T(3), T(8), T(-7)};
    const std::vector<T> b = {T(4), T(5), T(-6), T(2), T(-1)};
    const std::vector<T> expected = run(a, b, op);
    std::vector<T> x = a;
    apply(x.data(), x.data(), b.data(), x.size(), Traits<T>::kType, op);  // dst == a
    EXPECT_EQ(x, expected);
    std::vector<T> y = b;
    apply(y.data(), a.data(), y.data(), y.size(), Traits<T>::kType, op);  // dst == b
    EXPECT_EQ(y, expected);
    std::vector<T> z = a;
    apply(z.data(), z.data(), z.data(), z.size(), Traits<T>::kType, op);  // all three
    EXPECT_EQ(z, run(a, a, op));
  }
}

TEST(Reduce, AliasingFloat32) { checkAliasing<float>(); }
TEST(Reduce, AliasingFloat64) { checkAliasing<double>(); }
TEST(Reduce, AliasingInt32) { checkAliasing<int32_t>(); }
TEST(Reduce, AliasingInt64) { checkAliasing<int64_t>(); }
TEST(Reduce, AliasingInt8) { checkAliasing<int8_t>(); }
TEST(Reduce, AliasingUInt8) { checkAliasing<uint8_t>(); }

TEST(Reduce, TouchesOnlyCountElements) {
  std::vector<int32_t> a = {1, 2, 3, 4};
  std::vector<int32_t> b = {10, 20, 30, 40};
  std::vector<int32_t> dst = {-1, -1, -1, -1};
  apply(dst.data(), a.data(), b.data(), 3, DataType::Int32, ReduceOp::Sum);
  EXPECT_EQ(dst, (std::vector<int32_t>{11, 22, 33, -1}));
  apply(dst.data(), a.data(), b.data(), 0, DataType::Int32, ReduceOp::Sum);
  EXPECT_EQ(dst, (std::vector<int32_t>{11, 22, 33, -1}));
  // Offset pointers (as the executor passes for a range) are fine.
  apply(dst.data() + 3, a.data() + 3, b.data() + 3, 1, DataType::Int32, ReduceOp::Max);
  EXPECT_EQ(dst[3], 40);
}

// dst may be a or b (any count: the vectorised blocks and the scalar tail); a dst that
// partly overlaps an input is computed in index order, like a plain loop: with
// dst = a + 1 and b all ones, each element is its left neighbour plus one.
TEST(Reduce, PartialOverlapRunsInIndexOrder) {
  for (size_t n : {1u, 7u, 8u, 9u, 31u, 64u, 100u}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<int32_t> v(n + 1, 0);
    const std::vector<int32_t> ones(n, 1);
    apply(v.data() + 1, v.data(), ones.data(), n, DataType::Int32, ReduceOp::Sum);
    for (size_t i = 0; i <= n; ++i) ASSERT_EQ(v[i], static_cast<int32_t>(i)) << i;
    std::vector<uint16_t> h(n + 1, floatToHalf(0));
    const std::vector<uint16_t> hones(n, floatToHalf(1));
    apply(h.data() + 1, h.data(), hones.data(), n, DataType::Float16, ReduceOp::Sum);
    for (size_t i = 0; i <= n; ++i) ASSERT_EQ(halfToFloat(h[i]), static_cast<float>(i)) << i;
    std::vector<uint16_t> bf(n + 1, floatToBFloat16(0));
    const std::vector<uint16_t> bones(n, floatToBFloat16(1));
    apply(bf.data() + 1, bones.data(), bf.data(), n, DataType::BFloat16, ReduceOp::Sum);
    for (size_t i = 0; i <= n; ++i) ASSERT_EQ(bfloat16ToFloat(bf[i]), static_cast<float>(i)) << i;
  }
}

TEST(Reduce, EveryCountAroundTheBlockSizes) {
  // Counts 0..200 cross the 64-byte blocks of every element size and the 8-element
  // float16 vectors; each result element must be its own op, in place or not.
  for (size_t n = 0; n <= 200; ++n) {
    std::vector<int8_t> a(n);
    std::vector<int8_t> b(n);
    std::vector<uint16_t> ha(n);
    std::vector<uint16_t> hb(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<int8_t>(i * 37);
      b[i] = static_cast<int8_t>(i * 11 + 3);
      ha[i] = floatToHalf(static_cast<float>(i) * 0.75f);
      hb[i] = floatToHalf(static_cast<float>(n - i));
    }
    auto s8 = run(a, b, ReduceOp::Sum);
    std::vector<uint16_t> hs(n, 0);
    apply(hs.data(), ha.data(), hb.data(), n, DataType::Float16, ReduceOp::Sum);
    apply(ha.data(), ha.data(), hb.data(), n, DataType::Float16, ReduceOp::Max);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(s8[i], static_cast<int8_t>(static_cast<uint8_t>(i * 48 + 3))) << n << " " << i;
      const float x = static_cast<float>(i) * 0.75f;
      const auto y = static_cast<float>(n - i);
      ASSERT_EQ(halfToFloat(hs[i]), halfToFloat(floatToHalf(x + y))) << n << " " << i;
      ASSERT_EQ(halfToFloat(ha[i]), std::max(x, y)) << n << " " << i;
    }
  }
}

TEST(Reduce, LongVectorsMatchScalarLoop) {
  // Long enough for the vectorised body plus a remainder.
  const size_t n = 1037;
  std::vector<int64_t> a(n);
  std::vector<int64_t> b(n);
  std::vector<double> fa(n);
  std::vector<double> fb(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<int64_t>(i * 7919 % 2003) - 1000;
    b[i] = static_cast<int64_t>(i * 104729 % 3001) - 1500;
    fa[i] = static_cast<double>(a[i]) * 0.5;
    fb[i] = static_cast<double>(b[i]) * 0.25;
  }
  const auto sum = run(a, b, ReduceOp::Sum);
  const auto prod = run(a, b, ReduceOp::Prod);
  const auto mn = run(a, b, ReduceOp::Min);
  const auto fmx = run(fa, fb, ReduceOp::Max);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], a[i] + b[i]) << "index " << i;
    ASSERT_EQ(prod[i], a[i] * b[i]) << "index " << i;
    ASSERT_EQ(mn[i], std::min(a[i], b[i])) << "index " << i;
    ASSERT_EQ(fmx[i], std::max(fa[i], fb[i])) << "index " << i;
  }
}

TEST(Reduce, IntegerSumWrapsWithoutUndefinedBehaviour) {
  const int32_t i32max = std::numeric_limits<int32_t>::max();
  const int32_t i32min = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(run<int32_t>({i32max, i32min, -1, i32max}, {1, -1, i32min, i32max}, ReduceOp::Sum),
            (std::vector<int32_t>{i32min, i32max, i32max, -2}));
  const int64_t i64max = std::numeric_limits<int64_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(run<int64_t>({i64max, i64min, i64max}, {1, -1, i64max}, ReduceOp::Sum),
            (std::vector<int64_t>{i64min, i64max, -2}));
  // Avg's reduction is a Sum and wraps the same way.
  EXPECT_EQ(run<int32_t>({i32max}, {1}, ReduceOp::Avg), (std::vector<int32_t>{i32min}));
}

TEST(Reduce, IntegerProdWrapsWithoutUndefinedBehaviour) {
  const int32_t i32max = std::numeric_limits<int32_t>::max();
  const int32_t i32min = std::numeric_limits<int32_t>::min();
  // 0x7fffffff * 2 = 0xfffffffe; INT_MIN * -1 = INT_MIN; 65536^2 = 2^32 = 0.
  EXPECT_EQ(run<int32_t>({i32max, i32min, 65536, 46341}, {2, -1, 65536, 46341}, ReduceOp::Prod),
            (std::vector<int32_t>{-2, i32min, 0, static_cast<int32_t>(2147488281u)}));
  const int64_t i64max = std::numeric_limits<int64_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(
      run<int64_t>({i64max, i64min, int64_t{1} << 32}, {2, -1, int64_t{1} << 32}, ReduceOp::Prod),
      (std::vector<int64_t>{-2, i64min, 0}));
}

TEST(Reduce, EightBitSumAndProdWrapModulo256) {
  // int8: 127+1 = -128, -128-1 = 127, -128-128 = 0, 100+100 = 200-256 = -56.
  EXPECT_EQ(run<int8_t>({127, -128, -128, 100, -1}, {1, -1, -128, 100, 1}, ReduceOp::Sum),
            (std::vector<int8_t>{-128, 127, 0, -56, 0}));
  // -128*-1 = 128 -> -128; 16*16 = 256 -> 0; 127*127 = 16129 = 63*256 + 1; 127*2 = 254
  // -> -2; -1*-128 = 128 -> -128; 64*4 = 256 -> 0.
  EXPECT_EQ(run<int8_t>({-128, 16, 127, 127, -1, 64}, {-1, 16, 127, 2, -128, 4}, ReduceOp::Prod),
            (std::vector<int8_t>{-128, 0, 1, -2, -128, 0}));
  EXPECT_EQ(run<int8_t>({127}, {1}, ReduceOp::Avg), (std::vector<int8_t>{-128}));
  // uint8: 255+1 = 0, 200+100 = 44, 128+128 = 0; 255*255 = 65025 = 254*256 + 1.
  EXPECT_EQ(run<uint8_t>({255, 200, 128}, {1, 100, 128}, ReduceOp::Sum),
            (std::vector<uint8_t>{0, 44, 0}));
  EXPECT_EQ(run<uint8_t>({255, 16, 255, 128}, {255, 16, 2, 2}, ReduceOp::Prod),
            (std::vector<uint8_t>{1, 0, 254, 0}));
}

TEST(Reduce, EightBitMinMaxAtTheExtremes) {
  EXPECT_EQ(run<int8_t>({127, -128, 0, -1}, {-128, 127, -1, 0}, ReduceOp::Min),
            (std::vector<int8_t>{-128, -128, -1, -1}));
  EXPECT_EQ(run<int8_t>({127, -128, 0, -1}, {-128, 127, -1, 0}, ReduceOp::Max),
            (std::vector<int8_t>{127, 127, 0, 0}));
  EXPECT_EQ(run<uint8_t>({255, 0, 128, 127}, {0, 255, 127, 128}, ReduceOp::Min),
            (std::vector<uint8_t>{0, 0, 127, 127}));
  EXPECT_EQ(run<uint8_t>({255, 0, 128, 127}, {0, 255, 127, 128}, ReduceOp::Max),
            (std::vector<uint8_t>{255, 255, 128, 128}));
}

TEST(Reduce, IntegerMinMaxAtTheExtremes) {
  const int64_t i64max = std::numeric_limits<int64_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(run<int64_t>({i64max, i64min, 0}, {i64min, i64max, -1}, ReduceOp::Min),
            (std::vector<int64_t>{i64min, i64min, -1}));
  EXPECT_EQ(run<int64_t>({i64max, i64min, 0}, {i64min, i64max, -1}, ReduceOp::Max),
            (std::vector<int64_t>{i64max, i64max, 0}));
}

TEST(Reduce, FloatNanRules) {
  // As documented: a NaN in b is ignored, a NaN in a propagates.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto mnB = run<float>({1.0f, -3.0f}, {nan, nan}, ReduceOp::Min);
  EXPECT_EQ(mnB, (std::vector<float>{1.0f, -3.0f}));
  const auto mxB = run<float>({1.0f, -3.0f}, {nan, nan}, ReduceOp::Max);
  EXPECT_EQ(mxB, (std::vector<float>{1.0f, -3.0f}));
  const auto mnA = run<float>({nan}, {1.0f}, ReduceOp::Min);
  EXPECT_TRUE(std::isnan(mnA[0]));
  const auto mxA = run<float>({nan}, {1.0f}, ReduceOp::Max);
  EXPECT_TRUE(std::isnan(mxA[0]));
  const double dnan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(run<double>({1.0}, {dnan}, ReduceOp::Sum)[0]));
  // Infinities are ordinary values.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(run<double>({inf, -inf}, {1.0, 1.0}, ReduceOp::Min), (std::vector<double>{1.0, -inf}));
  EXPECT_EQ(run<double>({inf}, {-2.0}, ReduceOp::Prod), (std::vector<double>{-inf}));
}

TEST(Reduce, SignedZeroMinMaxKeepsA) {
  // -0.0 and +0.0 compare equal: Min and Max keep a.
  const auto mn = run<double>({-0.0, 0.0}, {0.0, -0.0}, ReduceOp::Min);
  EXPECT_TRUE(std::signbit(mn[0]));
  EXPECT_FALSE(std::signbit(mn[1]));
  const auto mx = run<double>({-0.0, 0.0}, {0.0, -0.0}, ReduceOp::Max);
  EXPECT_TRUE(std::signbit(mx[0]));
  EXPECT_FALSE(std::signbit(mx[1]));
}

// ---- float16 and bfloat16 -----------------------------------------------------------

const DataType kHalfTypes[] = {DataType::Float16, DataType::BFloat16};

uint16_t enc(DataType t, float f) {
  return t == DataType::Float16 ? floatToHalf(f) : floatToBFloat16(f);
}
float dec(DataType t, uint16_t h) {
  return t == DataType::Float16 ? halfToFloat(h) : bfloat16ToFloat(h);
}

std::vector<uint16_t> runBits(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                              DataType t, ReduceOp op) {
  std::vector<uint16_t> dst(a.size(), 0x5555);
  apply(dst.data(), a.data(), b.data(), a.size(), t, op);
  return dst;
}

// Operands given as floats that the type represents exactly (checked); result as floats.
std::vector<float> runHalf(const std::vector<float>& a, const std::vector<float>& b, DataType t,
                           ReduceOp op) {
  std::vector<uint16_t> x;
  std::vector<uint16_t> y;
  for (float f : a) x.push_back(enc(t, f));
  for (float f : b) y.push_back(enc(t, f));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(dec(t, x[i]), a[i]) << "operand a[" << i << "] is not exact in " << toString(t);
    EXPECT_EQ(dec(t, y[i]), b[i]) << "operand b[" << i << "] is not exact in " << toString(t);
  }
  std::vector<float> out;
  for (uint16_t h : runBits(x, y, t, op)) out.push_back(dec(t, h));
  return out;
}

std::vector<float> divideHalf(const std::vector<float>& v, DataType t, int divisor) {
  std::vector<uint16_t> x;
  for (float f : v) x.push_back(enc(t, f));
  divide(x.data(), x.size(), t, divisor);
  std::vector<float> out;
  for (uint16_t h : x) out.push_back(dec(t, h));
  return out;
}

TEST(Reduce, HalfTypesAllOps) {
  for (DataType t : kHalfTypes) {
    SCOPED_TRACE(std::string(toString(t)));
    const std::vector<float> a = {1, -2, 3, 0, -7, 6, 5, 0.5f};
    const std::vector<float> b = {4, 5, -6, 9, -1, 6, -3, 0.25f};
    EXPECT_EQ(runHalf(a, b, t, ReduceOp::Sum), (std::vector<float>{5, 3, -3, 9, -8, 12, 2, 0.75f}));
    EXPECT_EQ(runHalf(a, b, t, ReduceOp::Avg), (std::vector<float>{5, 3, -3, 9, -8, 12, 2, 0.75f}));
    EXPECT_EQ(runHalf(a, b, t, ReduceOp::Prod),
              (std::vector<float>{4, -10, -18, 0, 7, 36, -15, 0.125f}));
    EXPECT_EQ(runHalf(a, b, t, ReduceOp::Min),
              (std::vector<float>{1, -2, -6, 0, -7, 6, -3, 0.25f}));
    EXPECT_EQ(runHalf(a, b, t, ReduceOp::Max), (std::vector<float>{4, 5, 3, 9, -1, 6, 5, 0.5f}));
  }
}

TEST(Reduce, HalfTypesAliasing) {
  for (DataType t : kHalfTypes) {
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
      SCOPED_TRACE(std::string(toString(t)) + " op " + std::to_string(static_cast<int>(op)));
      const std::vector<uint16_t> a = {enc(t, 1), enc(t, -2.5f), enc(t, 3), enc(t, 1000)};
      const std::vector<uint16_t> b = {enc(t, 4), enc(t, 5), enc(t, -0.125f), enc(t, 3)};
      const std::vector<uint16_t> expected = runBits(a, b, t, op);
      std::vector<uint16_t> x = a;
      apply(x.data(), x.data(), b.data(), x.size(), t, op);
      EXPECT_EQ(x, expected);
      std::vector<uint16_t> y = b;
      apply(y.data(), a.data(), y.data(), y.size(), t, op);
      EXPECT_EQ(y, expected);
      std::vector<uint16_t> z = a;
      apply(z.data(), z.data(), z.data(), z.size(), t, op);
      EXPECT_EQ(z, runBits(a, a, t, op));
    }
  }
}

TEST(Reduce, Float16RoundsToNearestEven) {
  const DataType t = DataType::Float16;
  // In [2048, 4096) the spacing is 2: odd integers are ties.
  //   2049 -> 2048 (even mantissa), 2051 -> 2052, 2053 -> 2052, -2051 -> -2052.
  // At 1 the spacing is 2^-10: 1 + 2^-11 is a tie -> 1; 1 + 3*2^-11 -> 1 + 2^-9;
  // just above a tie rounds up: 1 + 2^-11 + 2^-20 -> 1 + 2^-10.
  EXPECT_EQ(runHalf({2048, 2048, 2048, -2048, 1, 1, 1},
                    {1, 3, 5, -3, 0x1p-11f, 0x3p-11f, 0x1p-11f + 0x1p-20f}, t, ReduceOp::Sum),
            (std::vector<float>{2048, 2052, 2052, -2052, 1, 1 + 0x1p-9f, 1 + 0x1p-10f}));
  // 45*91 = 4095, a tie between 4094 (odd mantissa) and 4096 -> 4096; 2049 is not
  // representable, so 683*3 = 2049 -> 2048; 1025*3 = 3075 -> 3076 (tie, even).
  EXPECT_EQ(runHalf({45, 683, 1025}, {91, 3, 3}, t, ReduceOp::Prod),
            (std::vector<float>{4096, 2048, 3076}));
}

TEST(Reduce, BFloat16RoundsToNearestEven) {
  const DataType t = DataType::BFloat16;
  // 8 significant bits: in [256, 512) the spacing is 2. 257 -> 256, 259 -> 260,
  // 261 -> 260. At 1 the spacing is 2^-7: 1 + 2^-8 -> 1, 1 + 3*2^-8 -> 1 + 2^-6,
  // 1 + 2^-8 + 2^-15 -> 1 + 2^-7.
  EXPECT_EQ(runHalf({256, 256, 256, -256, 1, 1, 1},
                    {1, 3, 5, -3, 0x1p-8f, 0x3p-8f, 0x1p-8f + 0x1p-15f}, t, ReduceOp::Sum),
            (std::vector<float>{256, 260, 260, -260, 1, 1 + 0x1p-6f, 1 + 0x1p-7f}));
  // 3*87 = 261 -> 260; 17*17 = 289 -> 288 (tie, even); 3*85 = 255 exact.
  EXPECT_EQ(runHalf({3, 17, 3}, {87, 17, 85}, t, ReduceOp::Prod),
            (std::vector<float>{260, 288, 255}));
}

TEST(Reduce, HalfTypesOverflowToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const DataType f16 = DataType::Float16;
  // Largest float16 65504; 65520 is the tie with 2^16, which rounds (to even) to inf.
  EXPECT_EQ(runHalf({65504, 65504, 65504, -65504, 255, 256, -300},
                    {15, 16, 65504, -16, 256, 256, 300}, f16, ReduceOp::Sum),
            (std::vector<float>{65504, inf, inf, -inf, 511, 512, 0}));
  EXPECT_EQ(runHalf({255, 256, -300}, {256, 256, 300}, f16, ReduceOp::Prod),
            (std::vector<float>{65280, inf, -inf}));
  const DataType bf16 = DataType::BFloat16;
  const float bmax = bfloat16ToFloat(0x7f7f);  // (2 - 2^-7) * 2^127
  // The spacing at the top is 2^120: + 2^119 is the tie (odd mantissa -> up -> inf).
  EXPECT_EQ(runHalf({bmax, bmax, bmax, -bmax}, {0x1p118f, 0x1p119f, bmax, -0x1p119f}, bf16,
                    ReduceOp::Sum),
            (std::vector<float>{bmax, inf, inf, -inf}));
  EXPECT_EQ(runHalf({0x1p127f, 0x1p100f, -0x1p64f}, {2, 0x1p27f, 0x1p64f}, bf16, ReduceOp::Prod),
            (std::vector<float>{inf, 0x1p127f, -inf}));
}

TEST(Reduce, HalfTypesSubnormals) {
  // float16: the smallest subnormal is 2^-24 (bits 0x0001), the smallest normal 2^-14.
  const DataType f16 = DataType::Float16;
  EXPECT_EQ(runBits({0x0001, 0x03ff, 0x0400, 0x8001}, {0x0001, 0x0001, 0x8001, 0x8001}, f16,
                    ReduceOp::Sum),
            (std::vector<uint16_t>{0x0002, 0x0400, 0x03ff, 0x8002}));
  // 2^-14 * 2^-10 = 2^-24 exactly; 2^-24 * 0.5 is a tie -> 0; 3 * 2^-24 * 0.5 -> 2 * 2^-24;
  // 5 * 2^-24 * 0.5 -> 2 * 2^-24; 2^-24 * 0.75 -> 2^-24; -2^-24 * 0.5 -> -0.
  const uint16_t half = floatToHalf(0.5f);
  EXPECT_EQ(runBits({0x0400, 0x0001, 0x0003, 0x0005, 0x0001, 0x8001},
                    {floatToHalf(0x1p-10f), half, half, half, floatToHalf(0.75f), half}, f16,
                    ReduceOp::Prod),
            (std::vector<uint16_t>{0x0001, 0x0000, 0x0002, 0x0002, 0x0001, 0x8000}));
  // bfloat16: the smallest subnormal is 2^-133 (0x0001), the smallest normal 2^-126 (0x0080).
  const DataType bf16 = DataType::BFloat16;
  const uint16_t bhalf = floatToBFloat16(0.5f);
  EXPECT_EQ(runBits({0x0001, 0x007f, 0x8001}, {0x0001, 0x0001, 0x8001}, bf16, ReduceOp::Sum),
            (std::vector<uint16_t>{0x0002, 0x0080, 0x8002}));
  EXPECT_EQ(runBits({0x0080, 0x0001, 0x0003, 0x8001},
                    {floatToBFloat16(0x1p-7f), bhalf, bhalf, bhalf}, bf16, ReduceOp::Prod),
            (std::vector<uint16_t>{0x0001, 0x0000, 0x0002, 0x8000}));
}

TEST(Reduce, HalfTypesInfinityAndNan) {
  for (DataType t : kHalfTypes) {
    SCOPED_TRACE(std::string(toString(t)));
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto sum = runHalf({inf, inf, -inf, 1, -inf}, {-inf, 1, -1, inf, -inf}, t, ReduceOp::Sum);
    EXPECT_TRUE(std::isnan(sum[0]));
    EXPECT_EQ(sum[1], inf);
    EXPECT_EQ(sum[2], -inf);
    EXPECT_EQ(sum[3], inf);
    EXPECT_EQ(sum[4], -inf);
    const auto prod = runHalf({0, -inf, inf}, {inf, 2, -0.5f}, t, ReduceOp::Prod);
    EXPECT_TRUE(std::isnan(prod[0]));
    EXPECT_EQ(prod[1], -inf);
    EXPECT_EQ(prod[2], -inf);
    // A NaN operand, quiet or signalling, gives a NaN (never an infinity).
    const uint16_t snan = t == DataType::Float16 ? 0x7c01 : 0x7f81;
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod}) {
      for (uint16_t n : {enc(t, nan), snan}) {
        EXPECT_TRUE(std::isnan(dec(t, runBits({n}, {enc(t, 1)}, t, op)[0])));
        EXPECT_TRUE(std::isnan(dec(t, runBits({enc(t, 1)}, {n}, t, op)[0])));
      }
    }
    // Min and Max: a NaN in b is ignored, a NaN in a propagates bit for bit.
    const uint16_t one = enc(t, 1);
    EXPECT_EQ(runBits({one, one}, {snan, enc(t, nan)}, t, ReduceOp::Min),
              (std::vector<uint16_t>{one, one}));
    EXPECT_EQ(runBits({one, one}, {snan, enc(t, nan)}, t, ReduceOp::Max),
              (std::vector<uint16_t>{one, one}));
    EXPECT_EQ(runBits({snan}, {one}, t, ReduceOp::Min), (std::vector<uint16_t>{snan}));
    EXPECT_EQ(runBits({snan}, {one}, t, ReduceOp::Max), (std::vector<uint16_t>{snan}));
    // Infinities are ordinary values; -0 and +0 compare equal, so Min and Max keep a.
    EXPECT_EQ(runHalf({inf, -inf}, {1, 1}, t, ReduceOp::Min), (std::vector<float>{1, -inf}));
    const uint16_t pz = enc(t, 0.0f);
    const uint16_t nz = enc(t, -0.0f);
    EXPECT_EQ(runBits({nz, pz}, {pz, nz}, t, ReduceOp::Min), (std::vector<uint16_t>{nz, pz}));
    EXPECT_EQ(runBits({nz, pz}, {pz, nz}, t, ReduceOp::Max), (std::vector<uint16_t>{nz, pz}));
    // x + (-x) is +0; -0 + -0 is -0.
    EXPECT_EQ(runBits({enc(t, 3), nz}, {enc(t, -3), nz}, t, ReduceOp::Sum),
              (std::vector<uint16_t>{pz, nz}));
  }
}

TEST(Divide, EightBitIntegersRoundTowardZero) {
  std::vector<int8_t> v = {-7, 7, -8, 8, -1, 1, 0, -128, 127};
  divide(v.data(), v.size(), DataType::Int8, 2);
  EXPECT_EQ(v, (std::vector<int8_t>{-3, 3, -4, 4, 0, 0, 0, -64, 63}));
  std::vector<int8_t> w = {-7, 7, -128, 127, -2};
  divide(w.data(), w.size(), DataType::Int8, 3);
  EXPECT_EQ(w, (std::vector<int8_t>{-2, 2, -42, 42, 0}));
  std::vector<uint8_t> u = {255, 7, 0, 128};
  divide(u.data(), u.size(), DataType::UInt8, 2);
  EXPECT_EQ(u, (std::vector<uint8_t>{127, 3, 0, 64}));
}

TEST(Divide, EightBitDivisorIsNeverNarrowed) {
  // A world size above 127 (or 255) must not wrap to a negative (or zero) divisor.
  std::vector<int8_t> v = {-128, 127, -100};
  divide(v.data(), v.size(), DataType::Int8, 200);
  EXPECT_EQ(v, (std::vector<int8_t>{0, 0, 0}));
  std::vector<int8_t> w = {-128, 127, -127};
  divide(w.data(), w.size(), DataType::Int8, 128);
  EXPECT_EQ(w, (std::vector<int8_t>{-1, 0, 0}));
  std::vector<uint8_t> u = {255, 0, 254};
  divide(u.data(), u.size(), DataType::UInt8, 256);
  EXPECT_EQ(u, (std::vector<uint8_t>{0, 0, 0}));
  std::vector<uint8_t> u2 = {255, 254};
  divide(u2.data(), u2.size(), DataType::UInt8, 255);
  EXPECT_EQ(u2, (std::vector<uint8_t>{1, 0}));
}

TEST(Divide, HalfTypesDivideInFloatAndRound) {
  // Not toward zero: -7 / 2 is -3.5 in both 16-bit float types.
  for (DataType t : kHalfTypes) {
    EXPECT_EQ(divideHalf({7, -7, 1, -1, 0}, t, 2),
              (std::vector<float>{3.5f, -3.5f, 0.5f, -0.5f, 0}))
        << toString(t);
  }
  // Quotients rounded to nearest (expected bits from Python's struct 'e' for float16).
  std::vector<uint16_t> h = {floatToHalf(1), floatToHalf(2), floatToHalf(5), floatToHalf(-1),
                             floatToHalf(100)};
  divide(h.data(), h.size(), DataType::Float16, 3);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3555, 0x3955, 0x3eab, 0xb555, 0x502b}));
  std::vector<uint16_t> b = {floatToBFloat16(1), floatToBFloat16(2), floatToBFloat16(5),
                             floatToBFloat16(-1), floatToBFloat16(100)};
  divide(b.data(), b.size(), DataType::BFloat16, 3);
  EXPECT_EQ(b, (std::vector<uint16_t>{0x3eab, 0x3f2b, 0x3fd5, 0xbeab, 0x4205}));
  // A large world: 65504 / 1000 = 65.504 -> 65.5; 1 / 1000 -> 0x1419.
  std::vector<uint16_t> big = {floatToHalf(65504), floatToHalf(1)};
  divide(big.data(), big.size(), DataType::Float16, 1000);
  EXPECT_EQ(big, (std::vector<uint16_t>{0x5418, 0x1419}));
  // The smallest subnormal halved is a tie -> 0; three of them halved -> two.
  std::vector<uint16_t> sub = {0x0001, 0x0003, 0x8001};
  divide(sub.data(), sub.size(), DataType::Float16, 2);
  EXPECT_EQ(sub, (std::vector<uint16_t>{0x0000, 0x0002, 0x8000}));
  std::vector<uint16_t> bsub = {0x0001, 0x0003};
  divide(bsub.data(), bsub.size(), DataType::BFloat16, 2);
  EXPECT_EQ(bsub, (std::vector<uint16_t>{0x0000, 0x0002}));
}

TEST(Divide, IntegersRoundTowardZero) {
  std::vector<int32_t> v = {-7, 7, -8, 8, -1, 1, 0, std::numeric_limits<int32_t>::min()};
  divide(v.data(), v.size(), DataType::Int32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 3, -4, 4, 0, 0, 0, -1073741824}));
  std::vector<int64_t> w = {-7, 7, -9, 9, std::numeric_limits<int64_t>::max()};
  divide(w.data(), w.size(), DataType::Int64, 3);
  EXPECT_EQ(w, (std::vector<int64_t>{-2, 2, -3, 3, 3074457345618258602}));
}

TEST(Divide, FloatsDivideExactly) {
  std::vector<float> f = {1.0f, -3.0f, 10.0f};
  divide(f.data(), f.size(), DataType::Float32, 4);
  EXPECT_EQ(f, (std::vector<float>{0.25f, -0.75f, 2.5f}));
  std::vector<double> d = {1.0, 7.0};
  divide(d.data(), d.size(), DataType::Float64, 3);
  EXPECT_DOUBLE_EQ(d[0], 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(d[1], 7.0 / 3.0);
}

TEST(Divide, ByOneAndZeroCountAreNoOps) {
  std::vector<int32_t> v = {-7, 5};
  divide(v.data(), v.size(), DataType::Int32, 1);
  EXPECT_EQ(v, (std::vector<int32_t>{-7, 5}));
  divide(v.data(), 0, DataType::Int32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-7, 5}));
  divide(v.data(), 1, DataType::Int32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 5}));
}

TEST(Divide, FloatAvgOfThreeRanks) {
  // What the Avg all-reduce does: Sum the contributions, divide once by n.
  std::vector<float> acc = {1.0f, 2.0f, -4.5f};
  const std::vector<float> r1 = {2.0f, 2.0f, 0.5f};
  const std::vector<float> r2 = {3.0f, 2.0f, 1.0f};
  apply(acc.data(), acc.data(), r1.data(), 3, DataType::Float32, ReduceOp::Avg);
  apply(acc.data(), acc.data(), r2.data(), 3, DataType::Float32, ReduceOp::Avg);
  divide(acc.data(), 3, DataType::Float32, 3);
  EXPECT_EQ(acc, (std::vector<float>{2.0f, 2.0f, -1.0f}));
  std::vector<int32_t> iacc = {-4, 1};
  const std::vector<int32_t> i1 = {-3, 1};
  apply(iacc.data(), iacc.data(), i1.data(), 2, DataType::Int32, ReduceOp::Avg);
  divide(iacc.data(), 2, DataType::Int32, 2);
  EXPECT_EQ(iacc, (std::vector<int32_t>{-3, 1}));  // -7/2 and 2/2
}

TEST(Divide, EightBitAvgWrapsInTheSumThenTruncates) {
  // Three ranks holding 100 each: the int8 sum 300 wraps to 44, then 44 / 3 = 14.
  std::vector<int8_t> acc = {100, -4};
  const std::vector<int8_t> r1 = {100, -3};
  const std::vector<int8_t> r2 = {100, 0};
  apply(acc.data(), acc.data(), r1.data(), 2, DataType::Int8, ReduceOp::Avg);
  apply(acc.data(), acc.data(), r2.data(), 2, DataType::Int8, ReduceOp::Avg);
  divide(acc.data(), 2, DataType::Int8, 3);
  EXPECT_EQ(acc, (std::vector<int8_t>{14, -2}));  // 44/3 and -7/3 toward zero
  // The same contributions in float16 give the true mean, rounded once at the end.
  EXPECT_EQ(divideHalf({300, -7}, DataType::Float16, 3), (std::vector<float>{100, -0x1.2acp1f}));
}

}  // namespace
}  // namespace tccl::reduce
