// What every fuzz target shares: a check that stops the run with a message libFuzzer keeps
// next to the crashing input, and small byte helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

// A broken invariant is a finding like any sanitizer report: print where and why, then
// abort so libFuzzer saves the input as a crash artifact.
#define FUZZ_CHECK(cond, what)                                                                  \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s (%s)\n", __FILE__, __LINE__, what, \
                   #cond);                                                                      \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace tccl::fuzz {

inline uint32_t loadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace tccl::fuzz
