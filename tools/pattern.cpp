// The demo's and the bench's check data: see pattern.hpp. Nothing here calls tccl's
// reduction kernels; the closed forms are written out for each op.
#include "pattern.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tccl/half.hpp"

namespace tccl::cli::pattern {
namespace {

uint64_t hashOf(size_t i) {
  uint64_t x = static_cast<uint64_t>(i) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The largest integer such that every integer in [0, it] is exact in the dtype and a
// sum of them there never wraps: the bound on every partial sum.
double exactLimit(DataType dt) {
  switch (dt) {
    case DataType::Float32:
      return 16777216.0;  // 2^24
    case DataType::Float64:
      return 9007199254740992.0;  // 2^53
    case DataType::Float16:
      return 2048;
    case DataType::BFloat16:
      return 256;
    case DataType::Int8:
      return 127;
    case DataType::UInt8:
      return 255;
    case DataType::Int32:
      return 2147483647.0;
    case DataType::Int64:
      return 4611686018427387904.0;  // 2^62
  }
  return 0;
}

struct Shape {
  uint64_t tMax = 0;  // t(i) in [0, tMax]
  uint64_t m = 1;     // e(i) in [0, m)
};

Shape shapeOf(int n, DataType dt, ReduceOp op) {
  Shape s;
  const auto world = static_cast<uint64_t>(std::max(n, 1));
  if (op == ReduceOp::Sum || op == ReduceOp::Avg) {
    const auto limit = static_cast<uint64_t>(exactLimit(dt));
    s.tMax = std::min(world, limit);
    s.m = std::clamp<uint64_t>((limit - s.tMax) / world + 1, 1, 7);
  } else {
    s.tMax = world;
    s.m = op == ReduceOp::Prod ? 1 : 7;
  }
  return s;
}

void parts(size_t i, int n, DataType dt, ReduceOp op, uint64_t* t, uint64_t* e) {
  const Shape s = shapeOf(n, dt, op);
  const uint64_t h = hashOf(i);
  *t = h % (s.tMax + 1);
  *e = (h >> 32) % s.m;
}

bool isFloat16(DataType dt) { return dt == DataType::Float16 || dt == DataType::BFloat16; }

// v as the dtype holds it (the rounding a store would do), as a double.
double rounded(double v, DataType dt) {
  double out = 0;
  uint8_t tmp[8];
  store(tmp, 0, dt, v);
  out = load(tmp, 0, dt);
  return out;
}

// 2^t modulo 2^bits, as the integer type T reads it.
template <typename T>
double wrappedPowerOfTwo(uint64_t t) {
  const uint64_t bits = t >= 64 ? 0 : uint64_t{1} << t;
  using U = std::make_unsigned_t<T>;
  return static_cast<double>(static_cast<T>(static_cast<U>(bits)));
}

}  // namespace

double reduceInput(int rank, size_t i, int n, DataType dtype, ReduceOp op) {
  uint64_t t = 0, e = 0;
  parts(i, n, dtype, op, &t, &e);
  const double inside = static_cast<uint64_t>(rank) < t ? 1 : 0;
  const auto ed = static_cast<double>(e);
  switch (op) {
    case ReduceOp::Prod:
      return 1 + inside;
    // The bitwise ops (integer dtypes only): e(i) < 64 in the low bits, and bit 6 (64)
    // set by the ranks inside (or, for BAnd, by those outside); for BXor only rank 0
    // carries e(i). Every value stays below 128, so int8 holds it.
    case ReduceOp::BOr:
      return ed + 64 * inside;
    case ReduceOp::BAnd:
      return ed + 64 * (1 - inside);
    case ReduceOp::BXor:
      return (rank == 0 ? ed : 0) + 64 * inside;
    default:
      return ed + inside;
  }
}

double reduceExpected(size_t i, int n, DataType dtype, ReduceOp op) {
  uint64_t t = 0, e = 0;
  parts(i, n, dtype, op, &t, &e);
  const auto world = static_cast<uint64_t>(n);
  const double sum = static_cast<double>(t + world * e);  // exact: below exactLimit
  switch (op) {
    case ReduceOp::Sum:
      return sum;
    case ReduceOp::Min:
      return static_cast<double>(e + (t >= world ? 1 : 0));
    case ReduceOp::Max:
      return static_cast<double>(e + (t > 0 ? 1 : 0));
    case ReduceOp::BOr:  // bit 6 from any rank inside
      return static_cast<double>(e + (t > 0 ? 64 : 0));
    case ReduceOp::BAnd:  // bit 6 only when every rank is outside
      return static_cast<double>(e + (t == 0 ? 64 : 0));
    case ReduceOp::BXor:  // bit 6 from an odd number of ranks inside
      return static_cast<double>(e + (std::min(t, world) % 2 == 1 ? 64 : 0));
    case ReduceOp::Avg:
      // The exact sum divided once, as the dtype divides: float for float32 and the
      // 16-bit floats (then rounded to 16 bits), double for float64, integer division
      // (truncating; the sum is never negative) for the integer types.
      switch (dtype) {
        case DataType::Float64:
          return sum / n;
        case DataType::Float32:
          return static_cast<float>(sum) / static_cast<float>(n);
        case DataType::Float16:
        case DataType::BFloat16:
          return rounded(static_cast<float>(sum) / static_cast<float>(n), dtype);
        default:
          return static_cast<double>((t + world * e) / world);
      }
    case ReduceOp::Prod:
      switch (dtype) {
        case DataType::Int8:
          return wrappedPowerOfTwo<int8_t>(t);
        case DataType::UInt8:
          return wrappedPowerOfTwo<uint8_t>(t);
        case DataType::Int32:
          return wrappedPowerOfTwo<int32_t>(t);
        case DataType::Int64:
          return wrappedPowerOfTwo<int64_t>(t);
        default:  // a power of two: exact until it overflows to infinity
          return rounded(std::ldexp(1.0, static_cast<int>(std::min<uint64_t>(t, 2000))), dtype);
      }
  }
  return 0;
}

double moved(int src, int dst, size_t i) {
  return static_cast<double>(
      (hashOf(i) % 97 + 31 * static_cast<uint64_t>(src) + 7 * static_cast<uint64_t>(dst)) % 97);
}

double load(const void* buf, size_t k, DataType dtype) {
  const auto* p = static_cast<const uint8_t*>(buf) + k * dataTypeSize(dtype);
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (dtype) {
    case DataType::Float32:
      return get(float{});
    case DataType::Float64:
      return get(double{});
    case DataType::Int32:
      return get(int32_t{});
    case DataType::Int64:
      return static_cast<double>(get(int64_t{}));
    case DataType::Float16:
      return halfToFloat(get(uint16_t{}));
    case DataType::BFloat16:
      return bfloat16ToFloat(get(uint16_t{}));
    case DataType::Int8:
      return get(int8_t{});
    case DataType::UInt8:
      return get(uint8_t{});
  }
  return 0;
}

void store(void* buf, size_t k, DataType dtype, double v) {
  auto* p = static_cast<uint8_t*>(buf) + k * dataTypeSize(dtype);
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  // Integer values in range by construction; -1 (an unwritten output's sentinel) wraps
  // to all ones in the unsigned type.
  switch (dtype) {
    case DataType::Float32:
      put(static_cast<float>(v));
      break;
    case DataType::Float64:
      put(v);
      break;
    case DataType::Int32:
      put(static_cast<int32_t>(v));
      break;
    case DataType::Int64:
      put(static_cast<int64_t>(v));
      break;
    case DataType::Float16:
      put(floatToHalf(static_cast<float>(v)));
      break;
    case DataType::BFloat16:
      put(floatToBFloat16(static_cast<float>(v)));
      break;
    case DataType::Int8:
      put(static_cast<int8_t>(v));
      break;
    case DataType::UInt8:
      put(static_cast<uint8_t>(static_cast<int>(v)));
      break;
  }
}

void fillReduce(void* buf, size_t count, DataType dtype, ReduceOp op, int rank, int n,
                size_t first) {
  for (size_t k = 0; k < count; ++k)
    store(buf, k, dtype, reduceInput(rank, first + k, n, dtype, op));
}

void fillMoved(void* buf, size_t count, DataType dtype, int src, int dst, size_t first) {
  for (size_t k = 0; k < count; ++k) store(buf, k, dtype, moved(src, dst, first + k));
}

namespace {

// Bit for bit: the expected value stored in the dtype against the bytes there.
template <typename F>
Wrong check(const void* buf, size_t count, DataType dtype, F expectedAt) {
  Wrong w;
  const size_t elem = dataTypeSize(dtype);
  uint8_t want[8];
  for (size_t k = 0; k < count; ++k) {
    const double x = expectedAt(k);
    store(want, 0, dtype, x);
    if (std::memcmp(want, static_cast<const uint8_t*>(buf) + k * elem, elem) == 0) continue;
    if (w.count++ == 0) {
      w.index = k;
      w.actual = load(buf, k, dtype);
      w.expected = isFloat16(dtype) ? load(want, 0, dtype) : x;
    }
  }
  return w;
}

}  // namespace

Wrong checkReduce(const void* buf, size_t count, DataType dtype, ReduceOp op, int n, size_t first) {
  return check(buf, count, dtype,
               [&](size_t k) { return reduceExpected(first + k, n, dtype, op); });
}

Wrong checkMoved(const void* buf, size_t count, DataType dtype, int src, int dst, size_t first) {
  return check(buf, count, dtype, [&](size_t k) { return moved(src, dst, first + k); });
}

}  // namespace tccl::cli::pattern
