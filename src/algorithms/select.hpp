// The cost model behind Algorithm::Auto.
//
// Each algorithm's predicted time is read off its schedule's shape:
//   time = steps * alpha + bytes_sent_by_the_busiest_rank * beta
//   ring : steps = 2(n-1),          bytes = 2(n-1)/n * V
//   naive: steps = n-1 (one message to each peer, each paying the per-message
//          cost on the sender),     bytes = (n-1) * V
//   tree : steps = 2 ceil(log2 n),  bytes = 2V (V at n = 2, 1.5V at n = 3)
//   hd   : steps = 2L + 2[rem > 0], bytes = (2(p-1)/p + [rem > 0]) * V
//   rd   : steps = L + [rem > 0] + [2 rem > p], bytes = (L + [rem > 0]) * V
// with p the largest power of two <= n, L = log2 p, rem = n - p (the closed forms in
// allreduce_algos.hpp). alpha (seconds per message) and beta (seconds per byte)
// default to loopback-class figures and can be set with TCCL_ALPHA_US and
// TCCL_BETA_GBPS (1/beta in GB/s). Ties go to the ring, then naive, tree, hd, rd.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "tccl/types.hpp"

namespace tccl::algo {

struct LinkModel {
  double alphaSec = 20e-6;
  double betaSecPerByte = 1.0 / 2.0e9;
  // Measured, not derived: halving-doubling moves the ring's bytes in fewer steps, yet
  // at 16-64 MiB on worlds 4 and 8 the ring was 5-12 % faster (docs/PERFORMANCE.md), so
  // hd's byte term counts this much more. In the tune file as hd_bandwidth_penalty=.
  double hdBandwidthPenalty = 1.10;
  // The defaults, then the tune file (TCCL_TUNE_FILE, else ~/.config/tccl/tune.conf,
  // if it exists; written by `tccl tune`), then TCCL_ALPHA_US / TCCL_BETA_GBPS.
  static LinkModel fromEnv();
  // "alpha_us=12.5\nbeta_gbps=2.75\n". load() returns nullopt for a missing file and
  // throws InvalidArgumentError naming the file for a malformed one.
  static std::optional<LinkModel> load(const std::string& path);
  void save(const std::string& path) const;
  static std::string tuneFilePath();
};

double predictRingSec(int n, size_t bytes, const LinkModel& m);
double predictNaiveSec(int n, size_t bytes, const LinkModel& m);
double predictTreeSec(int n, size_t bytes, const LinkModel& m);
double predictHalvingDoublingSec(int n, size_t bytes, const LinkModel& m);
double predictRecursiveDoublingSec(int n, size_t bytes, const LinkModel& m);
// The prediction for any all-reduce algorithm (0 for Auto or one without a model).
double predictAllreduceSec(Algorithm a, int n, size_t bytes, const LinkModel& m);

// Picks the all-reduce algorithm with the least predicted time; `why` (optional)
// receives every candidate's prediction: "cost model: ring 12.0 us, tree 8.1 us, ...".
Algorithm chooseAllreduce(int n, size_t bytes, const LinkModel& m, std::string* why);

// Broadcast of V bytes in segments of S (k = ceil(V/S)), L = ceil(log2 n):
//   binomial tree (Algorithm::Tree): L rounds, each a full message: L x (alpha + V beta)
//   pipelined chain (Algorithm::Ring): (n - 2 + k) segment hops: (n-2+k) x (alpha + S beta)
// The tree wins for small messages (fewer rounds), the chain for large ones (every
// link carries V once, in parallel). Ties go to the tree.
double predictTreeBroadcastSec(int n, size_t bytes, const LinkModel& m);
double predictChainBroadcastSec(int n, size_t bytes, size_t segmentBytes, const LinkModel& m);
Algorithm chooseBroadcast(int n, size_t bytes, size_t segmentBytes, const LinkModel& m,
                          std::string* why);

}  // namespace tccl::algo
