// Elementwise reduction kernels, one per (dtype, op), as plain loops the compiler
// vectorises. Integer Sum and Prod wrap modulo 2^bits (computed in unsigned
// arithmetic: no undefined behaviour on overflow). Min and Max on floating types
// follow std::min/std::max on (a, b): a NaN in b is ignored, a NaN in a propagates.
// Float16 and BFloat16 compute each element in float and round the result to nearest
// even (tccl/half.hpp): since float has at least 2p+2 bits for their p-bit
// significands, that double rounding equals one correct IEEE rounding of the exact
// result; overflow gives infinity, a NaN stays a NaN. Their Min and Max compare as
// float and return one of the two inputs bit for bit. On x86-64 CPUs that have them,
// float16 uses the F16C conversion instructions and bfloat16 an AVX2 build of the same
// loops; the results are the same bit for bit.
#pragma once

#include <cstddef>

#include "tccl/types.hpp"

namespace tccl::reduce {

// dst[i] = a[i] op b[i] for i in [0, count). dst may be the same buffer as a or b.
// op Avg reduces as Sum; the division happens once, in finalizeAvg. BAnd, BOr and BXor
// combine the bit patterns (callers allow them on the integer types only).
void apply(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// buf[i] /= divisor. Integer types: C++ division of the value by the int divisor,
// which rounds toward zero (int8 -7 / 2 == -3; the divisor is never narrowed to 8
// bits). Float16 and BFloat16: float division, rounded to nearest even.
void divide(void* buf, size_t count, DataType dtype, int divisor);

}  // namespace tccl::reduce
