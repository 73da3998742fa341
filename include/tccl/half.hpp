// 16-bit floating element types: IEEE 754 binary16 (tccl::float16) and bfloat16
// (tccl::bfloat16), as 2-byte storage with explicit conversions to and from float.
//
//   std::vector<tccl::bfloat16> grad(n, tccl::bfloat16(0.5f));
//   comm.allreduce(std::span<tccl::bfloat16>(grad));   // DataType::BFloat16
//   float g0 = static_cast<float>(grad[0]);
//
// The types carry no arithmetic on purpose: convert to float, compute, convert back,
// which is what the reduction kernels do. float -> 16 bits rounds to nearest, ties to
// even (under the FPU's default rounding mode, which float16's subnormal case relies
// on); overflow gives infinity; a NaN stays a NaN (made quiet, sign and top payload
// bits kept). 16 bits -> float is exact (a signalling float16 NaN comes out quiet).
// The float16 conversions give bit for bit the results of x86's F16C instructions on
// every input. They are branch-free so that loops over arrays of them vectorise, and
// they do not depend on the FPU's flush-to-zero or denormals-are-zero modes (bfloat16
// subnormals are float subnormals, so arithmetic on them does).
#pragma once

#include <bit>
#include <cstdint>

namespace tccl {

namespace half_detail {
// All ones when c, else zero; then a branch-free select. Written with masks because
// GCC does not if-convert the equivalent ?: chains, and a branch stops vectorisation.
constexpr uint32_t maskIf(bool c) { return 0u - static_cast<uint32_t>(c); }
constexpr uint32_t select(uint32_t mask, uint32_t ifSet, uint32_t ifClear) {
  return (mask & ifSet) | (~mask & ifClear);
}
}  // namespace half_detail

// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Largest finite 65504,
// smallest normal 2^-14, smallest subnormal 2^-24; integers up to 2048 are exact.
constexpr float halfToFloat(uint16_t h) {
  using namespace half_detail;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent, mantissa
  // Normal: rebias the exponent (15 -> 127) by adding 112 to it. Infinity and NaN
  // (exponent 31): add 112 once more, to 255, keeping the mantissa (the NaN payload);
  // a NaN also gets the quiet bit, as IEEE conversions (and F16C's VCVTPH2PS) do.
  const uint32_t isSpecial = maskIf(shifted >= (0x1fu << 23));
  const uint32_t isNan = maskIf(shifted > (0x1fu << 23));
  const uint32_t normal =
      (shifted + (112u << 23) + (isSpecial & (112u << 23))) | (isNan & 0x00400000u);
  // Subnormal and zero (exponent 0): mantissa x 2^-24, from an integer so that an FPU
  // in denormals-are-zero mode cannot flush it.
  const auto mantissa = static_cast<int32_t>(h & 0x3ffu);
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 0x1p-24f);
  return std::bit_cast<float>(sign | select(maskIf(shifted < (1u << 23)), subnormal, normal));
}

constexpr uint16_t floatToHalf(float f) {
  using namespace half_detail;
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;  // |f|
  // |f| >= 2^-14 (a normal half): rebias the exponent (127 -> 15) and drop 13 mantissa
  // bits rounding to nearest even: add just under half of the dropped unit, plus one if
  // the kept part is odd. A carry out of the mantissa bumps the exponent, and out of
  // the largest exponent gives 0x7c00, infinity: values from 65520 up round there.
  // (For smaller |f| the subtraction wraps; that lane is not selected.)
  const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // |f| < 2^-14 (subnormal half or zero): in [0.5, 1) float's unit in the last place
  // is 2^-24, the subnormal half's unit, so adding 0.5 rounds |f| to a multiple of it
  // (to nearest even, the FPU's default), and the bits above 0.5 are the half's bits.
  // 2^-14 - 2^-25 and up come out as 0x400, the smallest normal, as they should.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - std::bit_cast<uint32_t>(0.5f);
  // |f| >= 2^16 is infinity; a NaN becomes a quiet NaN with the top payload bits.
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t h = select(maskIf(a < (113u << 23)), subnormal, normal);
  h = select(maskIf(a >= (143u << 23)), 0x7c00u, h);
  h = select(maskIf(a > 0x7f800000u), nan, h);
  return static_cast<uint16_t>(h | sign);
}

// bfloat16: the top 16 bits of a float (1 sign, 8 exponent, 7 mantissa bits); float's
// range with 8 significant bits. Integers up to 256 are exact.
constexpr float bfloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

constexpr uint16_t floatToBFloat16(float f) {
  using namespace half_detail;
  const uint32_t x = std::bit_cast<uint32_t>(f);
  // Round the low 16 bits away to nearest even (a carry may reach infinity, correctly);
  // a NaN keeps its sign and top payload bits and is made quiet so it cannot become
  // infinity.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>(select(maskIf((x & 0x7fffffffu) > 0x7f800000u), nan, rounded));
}

// Storage types for the DataType::Float16 and DataType::BFloat16 elements: trivially
// copyable, two bytes, the IEEE bit pattern in `bits`.
struct float16 {
  uint16_t bits;
  float16() = default;
  constexpr explicit float16(float f) : bits(floatToHalf(f)) {}
  constexpr explicit operator float() const { return halfToFloat(bits); }
  static constexpr float16 fromBits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
};

struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  constexpr explicit bfloat16(float f) : bits(floatToBFloat16(f)) {}
  constexpr explicit operator float() const { return bfloat16ToFloat(bits); }
  static constexpr bfloat16 fromBits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2);

}  // namespace tccl
