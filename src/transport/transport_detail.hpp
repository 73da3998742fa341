// What transport.cpp and transport_service.cpp share.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "transport/link.hpp"

namespace tccl::transport_detail {

// A listener's WARN lines about strangers (refused, dropped, closed mid-handshake): the
// first this many, then one line, then only a count (a flood must not flood the log).
inline constexpr uint64_t kStrangerLines = 10;

inline std::string addrKey(int rank) { return "addr/" + std::to_string(rank); }

inline const char* laneName(Lane lane) { return lane == Lane::P2P ? "p2p" : "collectives"; }

// The refusal of a peer with another TCCL_NSOCKS (wire::RejectReason::NsocksDiffers),
// naming both ranks and both values (it may be quoted on other ranks as the job's cause).
inline std::string nsocksDiffer(int peer, int peerSockets, int self, int selfSockets) {
  return "rank " + std::to_string(peer) + " has TCCL_NSOCKS=" + std::to_string(peerSockets) +
         " and rank " + std::to_string(self) + " has TCCL_NSOCKS=" + std::to_string(selfSockets) +
         ": set TCCL_NSOCKS the same on every rank";
}

}  // namespace tccl::transport_detail
