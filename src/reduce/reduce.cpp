#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tccl/half.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TCCL_REDUCE_X86 1
#include <immintrin.h>
#endif

namespace tccl::reduce {
namespace {

// Integer arithmetic that wraps instead of overflowing (signed overflow is UB). For
// 8-bit types the unsigned operands promote to int, where 255 * 255 still fits.
template <typename T>
inline T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename T>
inline T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// Vectorising dst[i] = f(a[i], b[i]) needs two things GCC's -O2 cost model ("very
// cheap") will not add on its own: a runtime check that dst does not alias a or b, and
// a scalar epilogue for n not a multiple of the vector width. So the loops below take
// restrict pointers (loop() first sorts out which buffers are the same one) and run an
// inner loop of a fixed kBlock elements, plus a scalar tail.
template <typename T>
constexpr size_t kBlock = 64 / sizeof(T);

template <typename T, typename F>
void loopDistinct(T* __restrict d, const T* __restrict x, const T* __restrict y, size_t n, F f) {
  size_t i = 0;
  for (; i + kBlock<T> <= n; i += kBlock<T>) {
    for (size_t j = 0; j < kBlock<T>; ++j) d[i + j] = f(x[i + j], y[i + j]);
  }
  for (; i < n; ++i) d[i] = f(x[i], y[i]);
}

// d[i] = f(d[i], y[i]).
template <typename T, typename F>
void loopInPlace(T* __restrict d, const T* __restrict y, size_t n, F f) {
  size_t i = 0;
  for (; i + kBlock<T> <= n; i += kBlock<T>) {
    for (size_t j = 0; j < kBlock<T>; ++j) d[i + j] = f(d[i + j], y[i + j]);
  }
  for (; i < n; ++i) d[i] = f(d[i], y[i]);
}

// p[i] = f(p[i]).
template <typename T, typename F>
void loopUnary(T* __restrict p, size_t n, F f) {
  size_t i = 0;
  for (; i + kBlock<T> <= n; i += kBlock<T>) {
    for (size_t j = 0; j < kBlock<T>; ++j) p[i + j] = f(p[i + j]);
  }
  for (; i < n; ++i) p[i] = f(p[i]);
}

template <typename T>
bool overlap(const T* p, const T* q, size_t n) {
  const auto pa = reinterpret_cast<uintptr_t>(p);
  const auto qa = reinterpret_cast<uintptr_t>(q);
  const size_t bytes = n * sizeof(T);
  return pa < qa + bytes && qa < pa + bytes;
}

template <typename T, typename F>
void loop(T* dst, const T* a, const T* b, size_t n, F f) {
  if (dst == a && dst == b) {
    for (size_t i = 0; i < n; ++i) dst[i] = f(dst[i], dst[i]);
  } else if (dst == a && !overlap(dst, b, n)) {
    loopInPlace(dst, b, n, f);
  } else if (dst == b && !overlap(dst, a, n)) {
    loopInPlace(dst, a, n, [f](T d, T x) { return f(x, d); });  // keep a as f's first operand
  } else if (!overlap(dst, a, n) && !overlap(dst, b, n)) {
    loopDistinct(dst, a, b, n, f);  // a and b may overlap each other: both are only read
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);  // partial overlaps, in order
  }
}

// Bitwise ops act on the bit patterns: the same for a signed type and its unsigned twin.
template <typename T>
void applyBitwise(T* d, const T* x, const T* y, size_t n, ReduceOp op) {
  if (op == ReduceOp::BAnd) {
    loop(d, x, y, n, [](T p, T q) { return static_cast<T>(p & q); });
  } else if (op == ReduceOp::BOr) {
    loop(d, x, y, n, [](T p, T q) { return static_cast<T>(p | q); });
  } else {
    loop(d, x, y, n, [](T p, T q) { return static_cast<T>(p ^ q); });
  }
}

template <typename T>
void applyTyped(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      loop(d, x, y, n, [](T p, T q) { return wrapAdd(p, q); });
      break;
    case ReduceOp::Prod:
      loop(d, x, y, n, [](T p, T q) { return wrapMul(p, q); });
      break;
    case ReduceOp::Min:
      loop(d, x, y, n, [](T p, T q) { return q < p ? q : p; });
      break;
    case ReduceOp::Max:
      loop(d, x, y, n, [](T p, T q) { return p < q ? q : p; });
      break;
    case ReduceOp::BAnd:
    case ReduceOp::BOr:
    case ReduceOp::BXor:
      if constexpr (std::is_integral_v<T>) applyBitwise(d, x, y, n, op);
      break;  // a floating T never gets here: apply() sends bitwise ops to applyBitwise
  }
}

template <typename T>
void divideTyped(void* buf, size_t n, int divisor) {
  // The usual arithmetic conversions pick the division: float for float, double for
  // double, int for int8/uint8/int32 (so an 8-bit divisor cannot wrap to 0), int64
  // for int64. The quotient's magnitude never exceeds the value's, so it fits T.
  loopUnary(static_cast<T*>(buf), n, [divisor](T v) { return static_cast<T>(v / divisor); });
}

// The 16-bit floating types, stored as their bit patterns: a codec to and from float.
struct Half {
  static float load(uint16_t h) { return halfToFloat(h); }
  static uint16_t store(float f) { return floatToHalf(f); }
};
struct BFloat {
  static float load(uint16_t h) { return bfloat16ToFloat(h); }
  static uint16_t store(float f) { return floatToBFloat16(f); }
};

template <typename C>
void applyHalf(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  using H = uint16_t;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      loop(d, x, y, n, [](H p, H q) { return C::store(C::load(p) + C::load(q)); });
      break;
    case ReduceOp::Prod:
      loop(d, x, y, n, [](H p, H q) { return C::store(C::load(p) * C::load(q)); });
      break;
    // Compare as float, return an input unchanged: the same NaN and signed-zero rules
    // as float32, and no rounding.
    case ReduceOp::Min:
      loop(d, x, y, n, [](H p, H q) { return C::load(q) < C::load(p) ? q : p; });
      break;
    case ReduceOp::Max:
      loop(d, x, y, n, [](H p, H q) { return C::load(p) < C::load(q) ? q : p; });
      break;
    case ReduceOp::BAnd:
    case ReduceOp::BOr:
    case ReduceOp::BXor:
      break;  // never here: apply() sends bitwise ops to applyBitwise
  }
}

template <typename C>
void divideHalf(void* buf, size_t n, int divisor) {
  const float d = static_cast<float>(divisor);
  loopUnary(static_cast<uint16_t*>(buf), n, [d](uint16_t v) { return C::store(C::load(v) / d); });
}

#ifdef TCCL_REDUCE_X86
// ---- x86-64: faster paths for the 16-bit floats, chosen at run time ----------------

// float16 with x86's F16C conversions (VCVTPH2PS, VCVTPS2PH with round to nearest
// even), 8 elements at a time: several times faster than the portable conversions,
// and bit for bit the same results (tccl/half.hpp matches these instructions on every
// input; half_test.cpp compares the two paths). Used when the CPU has AVX and F16C
// (x86-64 CPUs since 2012), and dst is a or b or disjoint from them; each function
// returns how many leading elements it did, and the portable loop does the rest.
bool haveF16C() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}

__attribute__((target("avx,f16c"))) inline __m128i raw8(const uint16_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
__attribute__((target("avx,f16c"))) inline void store8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
// The 16-bit lanes of y where the 32-bit mask is set, else those of x.
__attribute__((target("avx,f16c"))) inline __m128i select8(__m256 takeY, __m128i x, __m128i y) {
  const __m128i lo = _mm_castps_si128(_mm256_castps256_ps128(takeY));
  const __m128i hi = _mm_castps_si128(_mm256_extractf128_ps(takeY, 1));
  return _mm_blendv_epi8(x, y, _mm_packs_epi32(lo, hi));
}

__attribute__((target("avx,f16c"))) size_t applyF16C(uint16_t* d, const uint16_t* x,
                                                     const uint16_t* y, size_t n, ReduceOp op) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i hx = raw8(x + i);
    const __m128i hy = raw8(y + i);
    const __m256 fx = _mm256_cvtph_ps(hx);
    const __m256 fy = _mm256_cvtph_ps(hy);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        store8(d + i, _mm256_add_ps(fx, fy));
        break;
      case ReduceOp::Prod:
        store8(d + i, _mm256_mul_ps(fx, fy));
        break;
      case ReduceOp::Min:  // y < x, false for a NaN, as in the portable loop
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         select8(_mm256_cmp_ps(fy, fx, _CMP_LT_OQ), hx, hy));
        break;
      case ReduceOp::Max:
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         select8(_mm256_cmp_ps(fx, fy, _CMP_LT_OQ), hx, hy));
        break;
      case ReduceOp::BAnd:
      case ReduceOp::BOr:
      case ReduceOp::BXor:
        return 0;  // never here: apply() sends bitwise ops to applyBitwise
    }
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t divideF16C(uint16_t* p, size_t n, int divisor) {
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(p + i, _mm256_div_ps(_mm256_cvtph_ps(raw8(p + i)), d));
  return i;
}

// The portable bfloat16 loops compiled for AVX2 as well (twice SSE2's width): flatten
// inlines everything they call into this clone, so it is the same code, and the same
// results bit for bit. Used when the CPU has AVX2.
bool haveAvx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
[[gnu::flatten]] __attribute__((target("avx2"))) void applyBFloat16Avx2(void* dst, const void* a,
                                                                        const void* b, size_t n,
                                                                        ReduceOp op) {
  applyHalf<BFloat>(dst, a, b, n, op);
}
[[gnu::flatten]] __attribute__((target("avx2"))) void divideBFloat16Avx2(void* buf, size_t n,
                                                                         int divisor) {
  divideHalf<BFloat>(buf, n, divisor);
}
#endif

void applyBFloat16(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
#ifdef TCCL_REDUCE_X86
  if (haveAvx2()) return applyBFloat16Avx2(dst, a, b, n, op);
#endif
  applyHalf<BFloat>(dst, a, b, n, op);
}

void divideBFloat16(void* buf, size_t n, int divisor) {
#ifdef TCCL_REDUCE_X86
  if (haveAvx2()) return divideBFloat16Avx2(buf, n, divisor);
#endif
  divideHalf<BFloat>(buf, n, divisor);
}

void applyFloat16(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  size_t done = 0;
#ifdef TCCL_REDUCE_X86
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  const bool inOrderSafe = (d == x || !overlap(d, x, n)) && (d == y || !overlap(d, y, n));
  if (n >= 8 && inOrderSafe && haveF16C()) done = applyF16C(d, x, y, n, op);
#endif
  applyHalf<Half>(static_cast<uint16_t*>(dst) + done, static_cast<const uint16_t*>(a) + done,
                  static_cast<const uint16_t*>(b) + done, n - done, op);
}

void divideFloat16(void* buf, size_t n, int divisor) {
  size_t done = 0;
#ifdef TCCL_REDUCE_X86
  if (n >= 8 && haveF16C()) done = divideF16C(static_cast<uint16_t*>(buf), n, divisor);
#endif
  divideHalf<Half>(static_cast<uint16_t*>(buf) + done, n - done, divisor);
}

}  // namespace

void apply(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  if (isBitwise(op)) {
    // On the bit patterns, by width. The public calls allow them on integer types only
    // (core/validate.cpp); on a floating type this would combine the encodings' bits.
    switch (dataTypeSize(dtype)) {
      case 1:
        return applyTyped<uint8_t>(dst, a, b, count, op);
      case 2:
        return applyTyped<uint16_t>(dst, a, b, count, op);
      case 4:
        return applyTyped<uint32_t>(dst, a, b, count, op);
      default:
        return applyTyped<uint64_t>(dst, a, b, count, op);
    }
  }
  switch (dtype) {
    case DataType::Float32:
      applyTyped<float>(dst, a, b, count, op);
      break;
    case DataType::Float64:
      applyTyped<double>(dst, a, b, count, op);
      break;
    case DataType::Int32:
      applyTyped<int32_t>(dst, a, b, count, op);
      break;
    case DataType::Int64:
      applyTyped<int64_t>(dst, a, b, count, op);
      break;
    case DataType::Float16:
      applyFloat16(dst, a, b, count, op);
      break;
    case DataType::BFloat16:
      applyBFloat16(dst, a, b, count, op);
      break;
    case DataType::Int8:
      applyTyped<int8_t>(dst, a, b, count, op);
      break;
    case DataType::UInt8:
      applyTyped<uint8_t>(dst, a, b, count, op);
      break;
  }
}

void divide(void* buf, size_t count, DataType dtype, int divisor) {
  if (divisor == 1) return;
  switch (dtype) {
    case DataType::Float32:
      divideTyped<float>(buf, count, divisor);
      break;
    case DataType::Float64:
      divideTyped<double>(buf, count, divisor);
      break;
    case DataType::Int32:
      divideTyped<int32_t>(buf, count, divisor);
      break;
    case DataType::Int64:
      divideTyped<int64_t>(buf, count, divisor);
      break;
    case DataType::Float16:
      divideFloat16(buf, count, divisor);
      break;
    case DataType::BFloat16:
      divideBFloat16(buf, count, divisor);
      break;
    case DataType::Int8:
      divideTyped<int8_t>(buf, count, divisor);
      break;
    case DataType::UInt8:
      divideTyped<uint8_t>(buf, count, divisor);
      break;
  }
}

}  // namespace tccl::reduce
