#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tccl::reduce {
namespace {

// Integer arithmetic that wraps instead of overflowing (signed overflow is UB).
template <typename T>
inline T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
inline T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T, typename F>
void loop(T* dst, const T* a, const T* b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
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
  }
}

template <typename T>
void divideTyped(void* buf, size_t n, int divisor) {
  T* p = static_cast<T*>(buf);
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
}

}  // namespace

void apply(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
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
  }
}

}  // namespace tccl::reduce
