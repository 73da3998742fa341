// Reduction kernels: every dtype x op with exact expected values, aliasing, integer
// wraparound without undefined behaviour, NaN rules, and the Avg division.
#include "reduce/reduce.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace tccl::reduce
