// The cost model behind Algorithm::Auto.
//
// Each algorithm's predicted time is read off its schedule's shape:
//   time = steps * alpha' + bytes_sent_by_the_busiest_rank * beta
//          + bytes_reduced_by_the_busiest_rank * gamma
// gamma is the local reduction's cost per byte (the kernel reads two operands and
// writes one); the reduced bytes are counted from the algorithm's own schedules
// (reducedBytesFactor): rd about log2(n) V, ...; the ring's (n-1)/n V and naive's
// (n-1) V are closed forms, their schedules being O(n) ops per rank.
// alpha' = alpha x sqrt(max(1, ranks on the busiest host / cores of rank 0's host)):
// with more ranks than cores every step also waits for the next rank to be scheduled.
// Measured on 2 cores (docs/PERFORMANCE.md): the per-step cost grows with the
// oversubscription, but less than linearly (8 B at 8 ranks: about 30 us a step where
// 2 ranks take 7 us a round trip); the square root fits those sweeps.
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
//
// Across hosts (a HostCosts with more than one host) there are two links: the one
// above within a host, and the inter-host link (interAlpha, interBeta). A flat
// algorithm's steps then each pay the inter-host alpha, and its bytes are bounded by
// the busier of the busiest rank's link and the busiest host's link to the others:
//   flat: steps * interAlpha + max(E_a * interBeta, bytes_a * beta) * V
// with E_a the most bytes one host sends to other hosts, as a multiple of V, counted
// from the actual layout (hostEgressBytes). The hierarchical algorithm (a candidate
// only with more than one host and more than one rank on some host) pays the intra-host
// alpha for its steps within hosts and the inter-host one for its steps across:
//   hier: S_intra * alpha + 2(H-1) * interAlpha + max(E_hier * interBeta, R * beta) * V
// with H hosts, E_hier ~ 2(H-1)/H, and for L ranks on every host S_intra = 2(L-1),
// R = 2(L-1)/L + 2(H-1)/(HL); for uneven hosts (its leader variant, chains within
// hosts) S_intra = 2(Lmax-1), R = 1 + 2(H-1)/H (a leader's bytes). Its phases pipeline
// segment by segment, so its bytes term is the slower link's share, as for the flat
// algorithms. Ties go to the flat algorithms.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tccl/types.hpp"

namespace tccl::algo {

struct HostLayout;

struct LinkModel {
  double alphaSec = 20e-6;
  double betaSecPerByte = 1.0 / 2.0e9;
  // Measured, not derived: halving-doubling moves the ring's bytes in fewer steps, yet
  // at 16-64 MiB on worlds 4 and 8 the ring was 5-12 % faster (docs/PERFORMANCE.md), so
  // hd's byte term counts this much more. In the tune file as hd_bandwidth_penalty=.
  double hdBandwidthPenalty = 1.10;
  // ...but only from this size up: at 2 MiB hd was 16 % faster than the ring on 4 ranks
  // (the penalty had handed that size to the ring). In the tune file as
  // hd_penalty_from_bytes=.
  double hdPenaltyFromBytes = 8.0 * (1 << 20);
  // The link between hosts: 10 Gb/s Ethernet-class defaults (an assumption, not a
  // measurement: set them for your network). TCCL_INTER_ALPHA_US, TCCL_INTER_BETA_GBPS,
  // or inter_alpha_us= / inter_beta_gbps= in the tune file.
  double interAlphaSec = 50e-6;
  double interBetaSecPerByte = 1.0 / 1.25e9;
  // Seconds per byte of local reduction (TCCL_GAMMA_GBPS, gamma_gbps= in the tune
  // file; `tccl tune` measures it). The default: a float32 sum of 4 MiB vectors on
  // one core of the 2-core x86 machines this project is tested on (18-40 GB/s).
  double gammaSecPerByte = 1.0 / 20.0e9;
  // Seconds per byte of one TCP flow between hosts when the network limits each flow
  // (a per-flow rate limit or policer; TCCL_FLOW_GBPS, flow_gbps= in the tune file);
  // 0: no per-flow limit known, the default. Decides whether several sockets per peer
  // stripe (chooseStriping, TCCL_NSOCKS).
  double flowSecPerByte = 0;
  // Online cores of rank 0's host (0: unknown, no oversubscription term). Set by the
  // communicator, not read from the tune file.
  int cores = 0;
  // The defaults, then the tune file (TCCL_TUNE_FILE, else ~/.config/tccl/tune.conf,
  // if it exists; written by `tccl tune`), then TCCL_ALPHA_US / TCCL_BETA_GBPS.
  static LinkModel fromEnv();
  // "alpha_us=12.5\nbeta_gbps=2.75\n" (plus optional hd_bandwidth_penalty=,
  // inter_alpha_us=, inter_beta_gbps= lines). load() returns nullopt for a missing
  // file and throws InvalidArgumentError naming the file for a malformed one.
  static std::optional<LinkModel> load(const std::string& path);
  void save(const std::string& path) const;
  static std::string tuneFilePath();
};

// Every field of a LinkModel as one line of text, exact (doubles as %.17g), for the job
// record rank 0 shares through the store so that every rank's Auto decides alike:
// "alpha_sec=... beta_sec_per_byte=... hd_bandwidth_penalty=... hd_penalty_from_bytes=...
// inter_alpha_sec=... inter_beta_sec_per_byte=... gamma_sec_per_byte=...
// flow_sec_per_byte=... cores=...".
// A field added to LinkModel without being added here does not compile (the encoder
// binds every field by name). decodeLinkModel needs every field, in that order, and
// returns nullopt for anything else.
std::string encodeLinkModel(const LinkModel& m);
std::optional<LinkModel> decodeLinkModel(const std::string& s);

double predictRingSec(int n, size_t bytes, const LinkModel& m);
double predictNaiveSec(int n, size_t bytes, const LinkModel& m);
double predictTreeSec(int n, size_t bytes, const LinkModel& m);
double predictHalvingDoublingSec(int n, size_t bytes, const LinkModel& m);
double predictRecursiveDoublingSec(int n, size_t bytes, const LinkModel& m);
// hd's bandwidth penalty for a message of this size (1 below hdPenaltyFromBytes).
double hdPenalty(size_t bytes, const LinkModel& m);

// The most bytes any one rank reduces in an all-reduce of V bytes, as a multiple of V,
// counted from the algorithm's schedules (cached per algorithm and world size); the
// ring's and naive's in closed form.
double reducedBytesFactor(Algorithm a, int n);

// What the cost model knows of the hosts (computed once per communicator).
struct HostCosts {
  int hosts = 1;
  int maxLocal = 1;
  bool leaders = false;  // the hierarchical algorithm uses its leader variant
  // Per algorithm (index: the enum's value), the busiest host's payload bytes to other
  // hosts as a multiple of V (hostEgressBytes over a large count).
  std::array<double, 8> egress{};
  static HostCosts of(const HostLayout& layout);
  // Whether the hierarchical algorithm is a candidate.
  bool hierarchical() const { return hosts > 1 && maxLocal > 1; }
};

// The prediction for any all-reduce algorithm (0 for Auto or one without a model).
// Without hosts, or with one host, the one-link model; the hierarchical algorithm
// there is predicted as the ring (with one host, or one rank per host, it is the ring).
double predictAllreduceSec(Algorithm a, int n, size_t bytes, const LinkModel& m,
                           const HostCosts* hosts = nullptr);

// Picks the all-reduce algorithm with the least predicted time; `why` (optional)
// receives every candidate's prediction: "cost model: ring 12.0 us, tree 8.1 us, ...".
// With hosts spanning several machines the flat algorithms are predicted over the
// inter-host link and the hierarchical algorithm competes (see above).
Algorithm chooseAllreduce(int n, size_t bytes, const LinkModel& m, std::string* why,
                          const HostCosts* hosts = nullptr);

// Broadcast of V bytes in segments of S (k = ceil(V/S)), L = ceil(log2 n):
//   binomial tree (Algorithm::Tree): L rounds, each a full message: L x (alpha + V beta)
//   pipelined chain (Algorithm::Ring): (n - 2 + k) segment hops: (n-2+k) x (alpha + S beta)
// The tree wins for small messages (fewer rounds), the chain for large ones (every
// link carries V once, in parallel). Ties go to the tree.
double predictTreeBroadcastSec(int n, size_t bytes, const LinkModel& m);
double predictChainBroadcastSec(int n, size_t bytes, size_t segmentBytes, const LinkModel& m);
Algorithm chooseBroadcast(int n, size_t bytes, size_t segmentBytes, const LinkModel& m,
                          std::string* why);

// ---- the pipeline segment of an all-reduce (docs/algorithms.md, "Segment size") -------
// When neither TCCL_SEGMENT_BYTES nor CommOptions::segmentBytes fixes it. The ring and
// halving-doubling move one piece P per step to each peer (the ring V/n, hd V/2 at its
// first step) and overlap, per step, the receive, the reduce and the send of the piece's
// segments: cut into k segments, a step costs about
//   k x alpha + P x (beta + gamma) + P x (beta + gamma) / k
// (k messages, the piece's wire and reduce time, and one segment's worth that does not
// overlap: the first receive before the first reduce, the last send after the last),
// which is least at the integer k next to sqrt(P x (beta + gamma) / alpha) (at least 1).
// The segment is P / k rounded up to a multiple of 4 KiB, and at most
// `cap` (the default segment, 1 MiB). The other algorithms, worlds of one rank, and
// worlds of more ranks than rank 0's host has cores (m.cores; 0, unknown, counts as
// too few) get `cap`: there the cores, not the overlap, bound the time, and more
// messages cost more (at worlds 4 and 8 on 2 cores, 1-70 % slower at 256 KiB-4 MiB).
// Every rank computes the same value from (a, n, bytes, the job's model).
size_t allreduceSegmentBytes(Algorithm a, int n, size_t bytes, const LinkModel& m, size_t cap);

// ---- several sockets per peer (TCCL_NSOCKS; docs/nsocks.md, docs/algorithms.md) --------
// One message of L bytes between hosts on one TCP flow, or cut into K parts carried by K
// flows at once:
//   t1(L) = interAlpha + L x max(interBeta, phi)
//   tK(L) = interAlpha + (K-1) x alpha + L x max(interBeta, phi / K)
// phi: one flow's seconds per byte (flowSecPerByte; 0 when no per-flow limit is known),
// interBeta: the link's, alpha: the per-message cost, paid once more for each extra
// socket (its send, its receive, its wake-up). Striping pays when tK(L) < t1(L):
//   L > T = (K-1) alpha / (max(interBeta, phi) - max(interBeta, phi / K))
// With no flow limit below the link's rate (phi <= interBeta, phi = 0 by default) the
// denominator is 0: never stripe. Messages are pipeline segments, so a T above the
// segment size means no message is striped either.
struct StripeChoice {
  bool stripe = false;
  uint64_t minBytes = UINT64_MAX;  // stripe messages of at least this many bytes
  double oneFlowSec = 0;           // t1 and tK of one segment
  double kFlowsSec = 0;
};
// floorBytes: the transport's smallest striped payload (minBytes is at least that).
StripeChoice chooseStriping(int nsocks, size_t segmentBytes, const LinkModel& m, std::string* why,
                            uint64_t floorBytes = 1);
double predictFlowsSec(int flows, size_t bytes, const LinkModel& m);

// ---- the uneven collectives (one algorithm each: a prediction, not a choice) ----------
// time = steps x alpha + the busiest rank's payload (what it sends or receives, the larger)
// x beta, with e the element size (docs/algorithms.md, "Uneven collectives"):
//   allgatherv, ring:        (N-1) alpha + max_r (T - c[r+1]) e beta   (T = sum of counts;
//                            segments pipeline, so each link carries every block but one)
//   reduce_scatter_v, ring:  (N-1) alpha + max_r (T - c[r]) e (beta + gamma)
//   alltoallv, pairwise:     (N-1) alpha + max_r max(sum_p!=r m[r][p], sum_p!=r m[p][r]) e beta
//                            (m[i][j]: elements rank i sends rank j; + 8 B count messages)
//   gatherv / scatterv, flat: (N-1) alpha + sum_p!=root c[p] e beta   (the root's link)
double predictAllGatherVSec(const std::vector<size_t>& counts, size_t elemSize, const LinkModel& m);
double predictReduceScatterVSec(const std::vector<size_t>& counts, size_t elemSize,
                                const LinkModel& m);
double predictAllToAllVSec(const std::vector<std::vector<size_t>>& sends, size_t elemSize,
                           const LinkModel& m);
double predictRootedVSec(const std::vector<size_t>& counts, int root, size_t elemSize,
                         const LinkModel& m);

}  // namespace tccl::algo
