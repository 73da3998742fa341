// Bootstrap: what a rank decides before it can talk to its peers (core/).
#pragma once

#include <chrono>
#include <string>

#include "tccl/store.hpp"

namespace tccl::bootstrap {

// The Communicator's whole decision for one rank: an explicit address (CommOptions::
// listenAddress) wins; else TCCL_SOCKET_IFNAME / TCCL_SOCKET_FAMILY / the route; then
// the loopback rule (rank 0 publishes its HostIdentity under "hostid/0" in `store`, the
// namespaced store, and a rank about to listen on loopback reads it). Logs the choice
// and why at INFO; throws InvalidArgumentError on no match or a refused loopback.
std::string decideListenAddress(const std::string& explicitAddress, const std::string& routeAddress,
                                Store& store, int rank, int worldSize,
                                std::chrono::milliseconds timeout);

}  // namespace tccl::bootstrap
