// Elementwise reduction kernels, one per (dtype, op), as plain loops the compiler
// vectorises. Integer Sum and Prod wrap modulo 2^bits (computed in unsigned
// arithmetic: no undefined behaviour on overflow). Min and Max on floating types
// follow std::min/std::max on (a, b): a NaN in b is ignored, a NaN in a propagates.
#pragma once

#include <cstddef>

#include "tccl/types.hpp"

namespace tccl::reduce {

// dst[i] = a[i] op b[i] for i in [0, count). dst may be the same buffer as a or b.
// op Avg reduces as Sum; the division happens once, in finalizeAvg.
void apply(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// buf[i] /= divisor (integer types: C++ division, rounds toward zero).
void divide(void* buf, size_t count, DataType dtype, int divisor);

}  // namespace tccl::reduce
