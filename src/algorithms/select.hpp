// The cost model behind Algorithm::Auto.
//
// Each algorithm's predicted time is read off its schedule's shape:
//   time = steps * alpha + bytes_sent_per_rank * beta
//   ring : steps = 2(n-1), bytes = 2(n-1)/n * V
//   naive: steps = n-1 (one message to each peer, each paying the per-message
//          cost on the sender), bytes = (n-1) * V
// alpha (seconds per message) and beta (seconds per byte) default to loopback-class
// figures and can be set with TCCL_ALPHA_US and TCCL_BETA_GBPS (1/beta in GB/s).
// Ties go to the ring.
#pragma once

#include <cstddef>
#include <string>

#include "tccl/types.hpp"

namespace tccl::algo {

struct LinkModel {
  double alphaSec = 20e-6;
  double betaSecPerByte = 1.0 / 2.0e9;
  static LinkModel fromEnv();
};

double predictRingSec(int n, size_t bytes, const LinkModel& m);
double predictNaiveSec(int n, size_t bytes, const LinkModel& m);

// Picks ring or naive; `why` (optional) receives the predicted times.
Algorithm chooseAllreduce(int n, size_t bytes, const LinkModel& m, std::string* why);

}  // namespace tccl::algo
