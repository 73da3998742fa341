// Small text helpers the multi-process tests share: reading a rank's log, counting lines.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace tccl::testing {

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Occurrences of part in s (overlapping ones included).
inline size_t countOf(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// The whole file ("" if it cannot be read).
inline std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tccl::testing
