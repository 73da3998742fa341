#include "tccl/types.hpp"

#include <algorithm>
#include <climits>
#include <string>

namespace tccl {

size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::Float32:
      return 4;
    case DataType::Float64:
      return 8;
    case DataType::Int32:
      return 4;
    case DataType::Int64:
      return 8;
    case DataType::Float16:
    case DataType::BFloat16:
      return 2;
    case DataType::Int8:
    case DataType::UInt8:
      return 1;
  }
  return 0;
}

bool isValid(DataType t) {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DataType::UInt8);
}
bool isValid(ReduceOp op) {
  return static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::BXor);
}

std::string_view toString(DataType t) {
  switch (t) {
    case DataType::Float32:
      return "float32";
    case DataType::Float64:
      return "float64";
    case DataType::Int32:
      return "int32";
    case DataType::Int64:
      return "int64";
    case DataType::Float16:
      return "float16";
    case DataType::BFloat16:
      return "bfloat16";
    case DataType::Int8:
      return "int8";
    case DataType::UInt8:
      return "uint8";
  }
  return "?";
}

std::string_view toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::BAnd:
      return "band";
    case ReduceOp::BOr:
      return "bor";
    case ReduceOp::BXor:
      return "bxor";
  }
  return "?";
}

std::string_view toString(Algorithm a) {
  switch (a) {
    case Algorithm::Auto:
      return "auto";
    case Algorithm::Ring:
      return "ring";
    case Algorithm::Tree:
      return "tree";
    case Algorithm::HalvingDoubling:
      return "hd";
    case Algorithm::RecursiveDoubling:
      return "rd";
    case Algorithm::Naive:
      return "naive";
    case Algorithm::Hierarchical:
      return "hier";
  }
  return "?";
}

namespace {

bool eq(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

template <typename E, size_t N>
std::optional<E> lookup(std::string_view s, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, value] : table) {
    if (eq(s, name)) return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<DataType> parseDataType(std::string_view s) {
  static const std::pair<const char*, DataType> kNames[] = {
      {"float32", DataType::Float32},   {"float", DataType::Float32},
      {"fp32", DataType::Float32},      {"f32", DataType::Float32},
      {"float64", DataType::Float64},   {"double", DataType::Float64},
      {"fp64", DataType::Float64},      {"f64", DataType::Float64},
      {"int32", DataType::Int32},       {"int", DataType::Int32},
      {"i32", DataType::Int32},         {"int64", DataType::Int64},
      {"long", DataType::Int64},        {"i64", DataType::Int64},
      {"float16", DataType::Float16},   {"half", DataType::Float16},
      {"fp16", DataType::Float16},      {"f16", DataType::Float16},
      {"bfloat16", DataType::BFloat16}, {"bf16", DataType::BFloat16},
      {"int8", DataType::Int8},         {"i8", DataType::Int8},
      {"uint8", DataType::UInt8},       {"u8", DataType::UInt8},
      {"byte", DataType::UInt8},
  };
  return lookup(s, kNames);
}

std::optional<ReduceOp> parseReduceOp(std::string_view s) {
  static const std::pair<const char*, ReduceOp> kNames[] = {
      {"sum", ReduceOp::Sum},   {"prod", ReduceOp::Prod}, {"product", ReduceOp::Prod},
      {"min", ReduceOp::Min},   {"max", ReduceOp::Max},   {"avg", ReduceOp::Avg},
      {"mean", ReduceOp::Avg},  {"band", ReduceOp::BAnd}, {"bor", ReduceOp::BOr},
      {"bxor", ReduceOp::BXor},
  };
  return lookup(s, kNames);
}

std::optional<Algorithm> parseAlgorithm(std::string_view s) {
  static const std::pair<const char*, Algorithm> kNames[] = {
      {"auto", Algorithm::Auto},
      {"ring", Algorithm::Ring},
      {"naive", Algorithm::Naive},
      {"tree", Algorithm::Tree},
      {"hd", Algorithm::HalvingDoubling},
      {"halving-doubling", Algorithm::HalvingDoubling},
      {"rabenseifner", Algorithm::HalvingDoubling},
      {"rd", Algorithm::RecursiveDoubling},
      {"recursive-doubling", Algorithm::RecursiveDoubling},
      {"hier", Algorithm::Hierarchical},
      {"hierarchical", Algorithm::Hierarchical}};
  return lookup(s, kNames);
}

int Deadline::pollTimeoutMs() const {
  if (isNever()) return -1;
  auto left = at_ - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so that a wait never returns just before the deadline and spins.
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

}  // namespace tccl
