// Public value types: element types, reduction ops, algorithms, deadlines.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tccl {

// Element types a collective can carry. The numeric values are part of the wire
// fingerprint: append only, never renumber. Float16 is IEEE binary16 and BFloat16 the
// top half of a float32 (C++ storage types tccl::float16 and tccl::bfloat16 in
// tccl/half.hpp); both reduce in float and round each result to nearest even.
enum class DataType : uint8_t {
  Float32 = 0,
  Float64 = 1,
  Int32 = 2,
  Int64 = 3,
  Float16 = 4,
  BFloat16 = 5,
  Int8 = 6,
  UInt8 = 7,
};

// Reductions. Avg is defined as: Sum over all ranks, then divide by the world size,
// once, at the end. For floating types that is a true division; for integer types it
// is C++ integer division, which rounds toward zero (-7 / 2 == -3). Float16 and
// BFloat16 divide in float and round the quotient to nearest even. BAnd, BOr and BXor
// are bitwise and, or and exclusive or, for the integer types only (int8, uint8, int32,
// int64; a floating type is an InvalidArgumentError), as MPI_BAND/BOR/BXOR and gloo.
enum class ReduceOp : uint8_t {
  Sum = 0,
  Prod = 1,
  Min = 2,
  Max = 3,
  Avg = 4,
  BAnd = 5,
  BOr = 6,
  BXor = 7,
};

// BAnd, BOr or BXor.
constexpr bool isBitwise(ReduceOp op) {
  return op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
}
// Int8, UInt8, Int32 or Int64: the types the bitwise ops apply to.
constexpr bool isInteger(DataType t) {
  return t == DataType::Int8 || t == DataType::UInt8 || t == DataType::Int32 ||
         t == DataType::Int64;
}

// Algorithms. Auto asks the cost model (see docs/algorithms.md). Which apply to which
// collective: all-reduce: ring, naive, tree, hd (recursive halving-doubling), rd
// (recursive doubling), hier (hierarchical: within each host, then across hosts);
// broadcast: tree (binomial) or ring (pipelined chain); the others have one algorithm
// each and take Auto or its name.
enum class Algorithm : uint8_t {
  Auto = 0,
  Ring = 1,
  Naive = 2,
  Tree = 3,
  HalvingDoubling = 4,
  RecursiveDoubling = 5,
  Hierarchical = 6,
};

size_t dataTypeSize(DataType t);
// False for values outside the enum (e.g. a cast from a bad integer).
bool isValid(DataType t);
bool isValid(ReduceOp op);
std::string_view toString(DataType t);
std::string_view toString(ReduceOp op);
std::string_view toString(Algorithm a);
// Parsers accept the names printed by toString and common aliases ("float", "double",
// "fp32", "f64", "int", "long", "half", "fp16", "bf16", "i8", "u8", "byte", ...),
// ignoring case. They return nullopt for anything else.
std::optional<DataType> parseDataType(std::string_view s);
std::optional<ReduceOp> parseReduceOp(std::string_view s);
std::optional<Algorithm> parseAlgorithm(std::string_view s);

// Point to point: a receive from any rank, or with any tag (MPI_ANY_SOURCE, MPI_ANY_TAG).
inline constexpr int kAnySource = -1;
inline constexpr int kAnyTag = -1;

// Deadlines, not durations: every blocking wait takes one of these, computed once
// per call. Deadline::never() is the single "no timeout" sentinel.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // A negative timeout, or one too long to represent as a time point, is never.
  static Deadline after(std::chrono::milliseconds timeout) { return after(timeout, Clock::now()); }
  // The same, counted from `now` (a clock the caller already read).
  static Deadline after(std::chrono::milliseconds timeout, Clock::time_point now) {
    if (timeout.count() < 0) return never();
    const auto room =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
    if (timeout >= room) return never();
    return Deadline(now + timeout);
  }
  explicit Deadline(Clock::time_point at) : at_(at) {}
  bool isNever() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !isNever() && Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, INT32_MAX]; -1 when never (poll(2) convention).
  int pollTimeoutMs() const;
  Clock::time_point at() const { return at_; }

 private:
  Clock::time_point at_;
};

}  // namespace tccl
