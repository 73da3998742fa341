// The 16-bit floating types (tccl/half.hpp) against an independent reference written
// with frexp/ldexp/nearbyint: every bit pattern decoded, every tie and near-tie between
// neighbouring values rounded, and the float16/bfloat16 kernels on random operands
// (including NaN, infinities and subnormals) compared element by element. Also the
// C++ element types: dataTypeOf and a typed all-reduce.
#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "reduce/reduce.hpp"
#include "tccl/tccl.hpp"

namespace tccl {
namespace {

// A binary format with p significant bits, smallest normal exponent emin, largest
// finite exponent emax, w exponent bits.
struct Format {
  DataType type;
  int p;
  int emin;
  int emax;
  int expBits;
};
constexpr Format kF16{DataType::Float16, 11, -14, 15, 5};
constexpr Format kBF16{DataType::BFloat16, 8, -126, 127, 8};
const Format kFormats[] = {kF16, kBF16};

float toFloat(const Format& f, uint16_t h) {
  return f.type == DataType::Float16 ? halfToFloat(h) : bfloat16ToFloat(h);
}
uint16_t fromFloat(const Format& f, float x) {
  return f.type == DataType::Float16 ? floatToHalf(x) : floatToBFloat16(x);
}

// Reference decoding from the fields.
double refDecode(const Format& f, uint16_t h) {
  const int fracBits = f.p - 1;
  const int bias = (1 << (f.expBits - 1)) - 1;
  const bool negative = (h >> 15) != 0;
  const int e = (h >> fracBits) & ((1 << f.expBits) - 1);
  const int m = h & ((1 << fracBits) - 1);
  double v;
  if (e == (1 << f.expBits) - 1)
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(m, f.emin - fracBits);
  else
    v = std::ldexp(m + (1 << fracBits), e - bias - fracBits);
  return negative ? -v : v;
}

// Reference rounding of x to the format, to nearest even, with IEEE overflow.
double refRound(const Format& f, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = 0;
  std::frexp(x, &e);                                        // |x| in [2^(e-1), 2^e)
  const int quantum = std::max(e - 1, f.emin) - (f.p - 1);  // exponent of the ulp
  const double y = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  const double maxFinite = std::ldexp(2.0 - std::ldexp(1.0, 1 - f.p), f.emax);
  if (std::fabs(y) > maxFinite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return y;
}

// Same value, same sign of zero; any NaN matches any NaN.
bool sameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(Half, ConstantsAndConstexpr) {
  static_assert(floatToHalf(1.0f) == 0x3c00);
  static_assert(floatToHalf(-2.0f) == 0xc000);
  static_assert(floatToHalf(65504.0f) == 0x7bff);
  static_assert(floatToHalf(65520.0f) == 0x7c00);
  static_assert(floatToHalf(0x1p-24f) == 0x0001);
  static_assert(floatToHalf(0x1p-25f) == 0x0000);
  static_assert(halfToFloat(0x3555) == 0x1.554p-2f);
  static_assert(halfToFloat(0x0001) == 0x1p-24f);
  static_assert(floatToBFloat16(1.0f) == 0x3f80);
  static_assert(bfloat16ToFloat(0x7f7f) == 0x1.fep127f);
  static_assert(static_cast<float>(float16(0.5f)) == 0.5f);
  static_assert(float16::fromBits(0x3c00).bits == float16(1.0f).bits);
  static_assert(static_cast<float>(bfloat16(3.0f)) == 3.0f);
  static_assert(sizeof(float16) == 2 && alignof(float16) == 2);
  static_assert(std::is_trivially_copyable_v<float16> && std::is_trivially_copyable_v<bfloat16>);
  static_assert(dataTypeOf<float16>() == DataType::Float16);
  static_assert(dataTypeOf<bfloat16>() == DataType::BFloat16);
  static_assert(dataTypeOf<int8_t>() == DataType::Int8);
  static_assert(dataTypeOf<uint8_t>() == DataType::UInt8);
  EXPECT_EQ(FE_TONEAREST, std::fegetround()) << "the tests assume the default rounding mode";
}

TEST(Half, EveryBitPatternDecodesAndRoundTrips) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(std::string(toString(f.type)));
    for (uint32_t i = 0; i <= 0xffff; ++i) {
      const auto h = static_cast<uint16_t>(i);
      const float v = toFloat(f, h);
      ASSERT_TRUE(sameValue(v, refDecode(f, h))) << std::hex << "bits 0x" << i;
      if (std::isnan(v)) {
        // Payload kept, made quiet: float16 like VCVTPH2PS; bfloat16 is the top half.
        const uint32_t payload =
            f.type == DataType::Float16 ? (i & 0x3ffu) << 13 : (i & 0x7fu) << 16;
        const uint32_t quiet = f.type == DataType::Float16 ? 0x00400000u : 0;
        ASSERT_EQ(std::bit_cast<uint32_t>(v), ((i & 0x8000u) << 16) | 0x7f800000u | quiet | payload)
            << std::hex << "bits 0x" << i;
      }
      const uint16_t back = fromFloat(f, v);
      if (std::isnan(v)) {
        // Quiet NaN, same sign, never an infinity.
        ASSERT_TRUE(std::isnan(toFloat(f, back))) << std::hex << "bits 0x" << i;
        ASSERT_EQ(back >> 15, h >> 15) << std::hex << "bits 0x" << i;
        ASSERT_NE(back & (1u << (f.p - 2)), 0u) << std::hex << "not quiet: 0x" << back;
      } else {
        ASSERT_EQ(back, h) << std::hex << "bits 0x" << i;
      }
    }
  }
}

TEST(Half, TiesAndNearTiesBetweenEveryPairOfNeighbours) {
  // Between two neighbouring finite values the midpoint needs p+1 bits, exact in a
  // float; it must go to the one with the even mantissa, and one float ulp either side
  // of it to the nearer one. The midpoint above the largest finite value is the
  // overflow threshold: it and everything above round to infinity.
  for (const Format& f : kFormats) {
    SCOPED_TRACE(std::string(toString(f.type)));
    const uint16_t infBits = static_cast<uint16_t>(((1u << f.expBits) - 1) << (f.p - 1));
    for (uint32_t lo = 0; lo < infBits; ++lo) {
      for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
        const auto a = static_cast<uint16_t>(lo | sign);
        const auto b = static_cast<uint16_t>((lo + 1) | sign);  // next away from zero
        const double va = refDecode(f, a);
        const double vb =
            lo + 1 == infBits ? std::copysign(std::ldexp(1.0, f.emax + 1), va) : refDecode(f, b);
        const auto mid = static_cast<float>((va + vb) / 2);
        ASSERT_EQ(static_cast<double>(mid), (va + vb) / 2);
        const uint16_t even = (lo & 1) == 0 ? a : b;
        ASSERT_EQ(fromFloat(f, mid), even) << std::hex << "tie after 0x" << a;
        const float below = std::nextafter(mid, 0.0f);
        const float above =
            std::nextafter(mid, std::copysign(std::numeric_limits<float>::infinity(), mid));
        ASSERT_EQ(fromFloat(f, below), a) << std::hex << "below the tie after 0x" << a;
        ASSERT_EQ(fromFloat(f, above), b) << std::hex << "above the tie after 0x" << a;
        ASSERT_TRUE(sameValue(toFloat(f, fromFloat(f, mid)), refRound(f, mid)));
      }
    }
    // Far out of range, infinities and NaN.
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(fromFloat(f, inf), infBits);
    EXPECT_EQ(fromFloat(f, -inf), infBits | 0x8000);
    EXPECT_EQ(fromFloat(f, std::numeric_limits<float>::max()), infBits);
    EXPECT_TRUE(std::isnan(toFloat(f, fromFloat(f, std::numeric_limits<float>::quiet_NaN()))));
    // A signalling float NaN whose payload lies only in the dropped bits stays a NaN.
    EXPECT_TRUE(std::isnan(toFloat(f, fromFloat(f, std::bit_cast<float>(0x7f800001u)))));
    EXPECT_TRUE(std::isnan(toFloat(f, fromFloat(f, std::bit_cast<float>(0xff800001u)))));
    // Below half the smallest subnormal: signed zero.
    EXPECT_EQ(fromFloat(f, std::numeric_limits<float>::denorm_min()), 0);
    EXPECT_EQ(fromFloat(f, -std::numeric_limits<float>::denorm_min()), 0x8000);
    if (f.type == DataType::Float16) {
      EXPECT_EQ(fromFloat(f, -1e-9f), 0x8000);
    }
  }
}

TEST(Half, RandomFloatsRoundLikeTheReference) {
  std::mt19937 rng(12345);
  for (const Format& f : kFormats) {
    SCOPED_TRACE(std::string(toString(f.type)));
    for (int i = 0; i < 200000; ++i) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
      const double want = refRound(f, x);
      const double got = toFloat(f, fromFloat(f, x));
      ASSERT_TRUE(sameValue(got, want)) << std::hexfloat << x << " -> " << got << ", want " << want;
    }
  }
}

// The kernels on random bit patterns against the reference: the exact result in double
// (exact for float16 sums and products, and bfloat16 products; otherwise rounded with
// 53 >= 2p+2 bits, which cannot change the final rounding) rounded once.
TEST(Half, KernelsMatchTheReferenceOnRandomOperands) {
  std::mt19937 rng(777);
  const size_t n = 100003;  // a vectorised body plus a remainder
  for (const Format& f : kFormats) {
    std::vector<uint16_t> a(n), b(n), out(n);
    for (size_t i = 0; i < n; ++i) {
      // Mostly moderate exponents, so that sums round, mixed with raw bit patterns.
      const uint32_t r = rng();
      if (i % 4 == 0) {
        a[i] = static_cast<uint16_t>(r);
        b[i] = static_cast<uint16_t>(r >> 16);
      } else {
        const uint16_t base = fromFloat(f, 1.0f) & 0x7fff;
        const auto spread = static_cast<uint16_t>(6u << (f.p - 1));
        a[i] = static_cast<uint16_t>(((base - spread / 2) + (r % spread)) | (r & 0x8000));
        b[i] = static_cast<uint16_t>(((base - spread / 2) + ((r >> 16) % spread)) |
                                     ((r >> 1) & 0x8000));
      }
    }
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
      SCOPED_TRACE(std::string(toString(f.type)) + " " + std::string(toString(op)));
      reduce::apply(out.data(), a.data(), b.data(), n, f.type, op);
      for (size_t i = 0; i < n; ++i) {
        const double x = refDecode(f, a[i]);
        const double y = refDecode(f, b[i]);
        if (op == ReduceOp::Min || op == ReduceOp::Max) {
          const bool takeB = op == ReduceOp::Min ? y < x : x < y;
          ASSERT_EQ(out[i], takeB ? b[i] : a[i]) << std::hex << a[i] << " " << b[i];
          continue;
        }
        const double want = refRound(f, op == ReduceOp::Prod ? x * y : x + y);
        ASSERT_TRUE(sameValue(refDecode(f, out[i]), want))
            << std::hex << "0x" << a[i] << " op 0x" << b[i] << " = 0x" << out[i] << std::hexfloat
            << ", want " << want;
      }
    }
    for (int divisor : {2, 3, 7, 1000}) {
      SCOPED_TRACE(std::string(toString(f.type)) + " / " + std::to_string(divisor));
      out = a;
      reduce::divide(out.data(), n, f.type, divisor);
      for (size_t i = 0; i < n; ++i) {
        const double want = refRound(f, refDecode(f, a[i]) / divisor);
        ASSERT_TRUE(sameValue(refDecode(f, out[i]), want))
            << std::hex << "0x" << a[i] << " / " << std::dec << divisor << " = 0x" << std::hex
            << out[i];
      }
    }
  }
}

// Arrays of 8 or more float16 take the F16C path on x86-64 CPUs that have it; a single
// element always takes the portable one. Every bit pattern against a set of partners,
// for every op and several divisors: the two must agree bit for bit (a NaN's payload
// is not specified: both must be NaN).
TEST(Half, Float16VectorAndScalarPathsAgreeBitForBit) {
  const uint16_t partners[] = {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x0001,
                               0x8001, 0x03ff, 0x0400, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
                               0xfd55, 0x3555, 0x6400, 0x1400, 0x5bff, 0xc7ff};
  std::vector<uint16_t> a(65536);
  for (uint32_t i = 0; i < 65536; ++i) a[i] = static_cast<uint16_t>(i);
  for (uint16_t p : partners) {
    const std::vector<uint16_t> b(a.size(), p);
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
      std::vector<uint16_t> vec(a.size());
      std::vector<uint16_t> inPlace = a;
      reduce::apply(vec.data(), a.data(), b.data(), a.size(), DataType::Float16, op);
      reduce::apply(inPlace.data(), inPlace.data(), b.data(), a.size(), DataType::Float16, op);
      for (size_t i = 0; i < a.size(); ++i) {
        uint16_t one = 0;
        reduce::apply(&one, &a[i], &b[i], 1, DataType::Float16, op);
        // A NaN result may carry either operand's payload depending on the path (F16C
        // conversion vs the portable one, and the optimiser); NaN-ness must agree.
        auto isNaN16 = [](uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; };
        if (isNaN16(one)) {
          ASSERT_TRUE(isNaN16(vec[i]) && isNaN16(inPlace[i]))
              << std::hex << "0x" << a[i] << " 0x" << p;
          continue;
        }
        ASSERT_EQ(vec[i], one) << std::hex << "0x" << a[i] << " " << toString(op) << " 0x" << p;
        ASSERT_EQ(inPlace[i], one) << std::hex << "0x" << a[i] << " " << toString(op) << " 0x" << p;
      }
    }
  }
  for (int divisor : {2, 3, 10, 65536, 1 << 30}) {
    std::vector<uint16_t> vec = a;
    reduce::divide(vec.data(), vec.size(), DataType::Float16, divisor);
    for (size_t i = 0; i < a.size(); ++i) {
      uint16_t one = a[i];
      reduce::divide(&one, 1, DataType::Float16, divisor);
      ASSERT_EQ(vec[i], one) << std::hex << "0x" << a[i] << " / " << std::dec << divisor;
    }
  }
}

// The C++ element types through the typed API: two ranks as threads.
TEST(Half, TypedAllreduceOfEveryNewElementType) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(store, r, 2);
        const auto rf = static_cast<float>(r);
        std::vector<float16> h(37, float16(1.5f + rf));            // 1.5 + 2.5
        std::vector<bfloat16> bf(37, bfloat16(-3.0f * (1 + rf)));  // -3 + -6
        std::vector<int8_t> i8(37, static_cast<int8_t>(100 + r));  // 100 + 101 wraps to -55
        std::vector<uint8_t> u8(37, static_cast<uint8_t>(250 + r));
        comm.allreduce(std::span<float16>(h));
        comm.allreduce(std::span<bfloat16>(bf), ReduceOp::Avg);
        comm.allreduce(std::span<int8_t>(i8));
        comm.allreduce(std::span<uint8_t>(u8), ReduceOp::Max);
        for (size_t i = 0; i < 37; ++i) {
          if (static_cast<float>(h[i]) != 4.0f || static_cast<float>(bf[i]) != -4.5f ||
              i8[i] != -55 || u8[i] != 251) {
            errors[static_cast<size_t>(r)] = "wrong value at index " + std::to_string(i);
            return;
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace tccl
