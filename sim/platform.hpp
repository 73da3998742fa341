// The platforms `tccl simulate` runs on: a cluster it builds from a few numbers (hosts,
// ranks per host, NIC bandwidth and latency, one switch or a fat tree), or any SimGrid
// platform file. Either way the result is a SimGrid netzone tree in the one s4u::Engine
// of the process, and a placement of ranks on its hosts.
//
// The built cluster (docs/simulate.md, "Platforms"):
//   - every host has `cores` cores of speed 1 flop/s (the replay turns a reduction's
//     seconds into flops of that speed, so that ranks sharing a core queue up);
//   - every host has one full-duplex NIC: a SPLITDUPLEX link of nicBytesPerSec each way,
//     so that a host sends and receives at full rate at once, as an Ethernet NIC does;
//   - the ranks of one host talk over its loopback link (loopbackBytesPerSec, shared by
//     every pair on that host: the memory bus and the kernel's loopback are one resource);
//   - star: every NIC meets one non-blocking switch; a message between two hosts crosses
//     two links (the sender's up, the receiver's down), each of latency latencySec / 2;
//   - fat tree "levels;down;up;count" (SimGrid's FatTreeParams): every link of the tree
//     has the NIC's bandwidth and latencySec / (2 x levels), so the farthest pair of hosts
//     is latencySec apart.
#pragma once

#include <string>
#include <vector>

#include "algorithms/allreduce_algos.hpp"

namespace simgrid::s4u {
class Host;
}

namespace tccl::sim {

// Creates the process's one s4u::Engine (SimGrid allows one), with the replay's network
// model (docs/simulate.md, "The model"): CM02 (latency + size / bandwidth, max-min
// sharing), no TCP window bound, no ACK cross traffic, no RTT weighting; then
// `extraConfig` ("network/model:LV08", ...) on top. Later calls do nothing.
void startEngine(const std::vector<std::string>& extraConfig);

struct ClusterSpec {
  int hosts = 4;
  int cores = 1;
  double nicBytesPerSec = 25e9 / 8;  // 25 Gb/s
  double latencySec = 5e-6;          // one way, host to host
  double loopbackBytesPerSec = 8e9;
  double loopbackLatencySec = 1e-6;
  std::string fatTree;  // "" for the star; else SimGrid's "levels;down;up;count"
};

// Builds the cluster as the engine's root netzone. Throws InvalidArgumentError for a
// malformed fat tree or one whose leaf count differs from spec.hosts (0 hosts: the fat
// tree's leaf count decides). Returns the hosts in order (host i is "host-i").
std::vector<simgrid::s4u::Host*> buildCluster(const ClusterSpec& spec);

// Loads a SimGrid platform file (any the engine accepts) and returns its hosts in
// natural name order ("node-2" before "node-10").
std::vector<simgrid::s4u::Host*> loadPlatform(const std::string& path);

// Ranks placed in blocks: rank r on hosts[r / ranksPerHost]. Throws InvalidArgumentError
// when the hosts are too few for `world` ranks.
struct RankPlacement {
  std::vector<simgrid::s4u::Host*> hostOfRank;
  algo::HostLayout layout;
};
RankPlacement placeRanks(const std::vector<simgrid::s4u::Host*>& hosts, int world,
                         int ranksPerHost);

// What the cost model (select.hpp) would be told about this platform: the route from
// rank 0's host to itself (alpha, beta) and to the host of the last rank (interAlpha,
// interBeta): latency = the route's latency, bandwidth = its slowest link.
struct RouteFigures {
  double latencySec = 0;
  double bytesPerSec = 0;
};
RouteFigures routeBetween(simgrid::s4u::Host* from, simgrid::s4u::Host* to);
int coreCount(const simgrid::s4u::Host* host);

// "a2b" < "a10b": digit runs compare as numbers.
bool naturalLess(const std::string& a, const std::string& b);

}  // namespace tccl::sim
